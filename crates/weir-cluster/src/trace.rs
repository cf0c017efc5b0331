//! Trace context across nodes: the edge's span carried with a forwarded op (`CounterOp.traceparent`), the gateway's forward span and the owner's decision span.
//!
//! The cluster knows only the OpenTelemetry API; the node builds the tracer
//! (its exporter, sampler and resource) and hands it over. With no tracer
//! nothing here runs: the edge enters no scope, so [`forward`] finds none
//! (one task-local read), and the owner checks one `OnceLock`.

use std::future::Future;
use std::sync::Arc;

use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags,
    TraceId, TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use weir_proto::weir::v1::op_result::Outcome;
use weir_proto::weir::v1::{CounterOp, DecideRequest, DecideResponse};

/// One node's tracer, shared by its edges, gateway and owner.
pub type Tracer = Arc<BoxedTracer>;

/// The sampled span of a check at the edge, under which its forwards run.
pub struct Edge {
    pub tracer: Tracer,
    pub cx: Context,
}

tokio::task_local! {
    static EDGE: Edge;
}

/// Runs a check under its edge span: the ops it forwards carry the span.
pub async fn within<F: Future>(edge: Edge, check: F) -> F::Output {
    EDGE.scope(edge, check).await
}

/// The span of sending `op` to `owner`, when the check that sends it is
/// traced: `op` carries its context, so the owner's decision is its child.
/// The span ends when dropped: on the answer, or when the gateway stops
/// waiting for it.
pub fn forward(op: &mut CounterOp, owner: &str) -> Option<BoxedSpan> {
    EDGE.try_with(|edge| {
        let span = edge.tracer.build_with_context(
            SpanBuilder::from_name("weir.forward")
                .with_kind(SpanKind::Client)
                .with_attributes([
                    KeyValue::new("weir.owner", owner.to_owned()),
                    KeyValue::new("weir.rule", op.rule.clone()),
                ]),
            &edge.cx,
        );
        op.traceparent = traceparent(span.span_context());
        span
    })
    .ok()
}

/// The owner's decision spans of one Decide call, one per traced op, each
/// the child of the forward that sent it.
pub struct Decisions {
    spans: Vec<(usize, BoxedSpan)>,
}

impl Decisions {
    /// Starts a span for each op of `req` that carries a trace context;
    /// None when none does.
    pub fn start(tracer: &BoxedTracer, req: &DecideRequest, me: &str) -> Option<Decisions> {
        let spans: Vec<_> = req
            .ops
            .iter()
            .enumerate()
            .filter_map(|(i, op)| {
                let parent = parse_traceparent(&op.traceparent)?;
                let cx = Context::new().with_remote_span_context(parent);
                let span = tracer.build_with_context(
                    SpanBuilder::from_name("weir.decide")
                        .with_kind(SpanKind::Server)
                        .with_attributes([
                            KeyValue::new("weir.rule", op.rule.clone()),
                            KeyValue::new("weir.from_node", req.from_node.clone()),
                            KeyValue::new("weir.node", me.to_owned()),
                        ]),
                    &cx,
                );
                Some((i, span))
            })
            .collect();
        (!spans.is_empty()).then_some(Decisions { spans })
    }

    /// Ends each span with its op's answer.
    pub fn end(self, resp: &DecideResponse) {
        for (i, mut span) in self.spans {
            match resp.results.get(i).and_then(|r| r.outcome.as_ref()) {
                Some(Outcome::Decision(d)) => {
                    span.set_attribute(KeyValue::new("weir.allowed", d.allowed))
                }
                _ => span.set_status(Status::error("undecided")),
            }
            span.end();
        }
    }
}

/// A W3C traceparent header value (version 00) for `cx`.
pub fn traceparent(cx: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        cx.trace_id(),
        cx.span_id(),
        cx.trace_flags().to_u8()
    )
}

/// Reads a W3C traceparent (`00-<32 hex>-<16 hex>-<2 hex>`); None for an
/// absent, malformed or all-zero one, which starts no remote parent.
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let version = parts.next()?;
    let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
    // A later version may append fields; version 00 has exactly four.
    if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex(version, 2) || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let cx = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags & TraceFlags::SAMPLED.to_u8()),
        true,
        TraceState::default(),
    );
    cx.is_valid().then_some(cx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips() {
        let v = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let cx = parse_traceparent(v).expect("valid");
        assert!(cx.is_sampled() && cx.is_remote());
        assert_eq!(traceparent(&cx), v);
    }

    #[test]
    fn malformed_or_zero_traceparents_are_refused() {
        for v in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01",
        ] {
            assert!(parse_traceparent(v).is_none(), "{v}");
        }
    }
}
