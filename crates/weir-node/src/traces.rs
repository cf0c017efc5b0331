//! OpenTelemetry traces: the OTLP/HTTP exporter a node's spans go to, and the span of a check at the edge.
//!
//! Off unless `--otlp-endpoint` is set: then the node holds no [`Traces`],
//! each edge takes one `None` branch, and nothing else runs (no span, no
//! context, no exporter task).

use std::future::Future;
use std::sync::Arc;

use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanKind, TraceContextExt, Tracer as _, TracerProvider,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use weir_cluster::trace::{parse_traceparent, within, Edge, Tracer};

/// Where spans go and how many checks that arrive untraced start a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceConfig {
    /// The collector's OTLP/HTTP base URL (`http://collector:4318`);
    /// spans are posted to `/v1/traces` under it. None: no traces.
    pub otlp_endpoint: Option<String>,
    /// The share of checks with no sampled `traceparent` that start a
    /// trace. A check whose caller sampled it is always traced, one whose
    /// caller did not never is (the W3C sampled flag decides).
    pub sample_ratio: f64,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig {
            otlp_endpoint: None,
            // One check in a hundred: enough to see where a slow check
            // spends its time, at a small share of a busy node's work.
            sample_ratio: 0.01,
        }
    }
}

impl TraceConfig {
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(format!(
                "--trace-sample-ratio must be between 0.0 and 1.0, got {}",
                self.sample_ratio
            ));
        }
        match &self.otlp_endpoint {
            Some(url) if !(url.starts_with("http://") && url.parse::<http::Uri>().is_ok()) => Err(
                format!("--otlp-endpoint must be an http:// URL (OTLP over HTTP), got {url:?}"),
            ),
            _ => Ok(()),
        }
    }

    /// The URL spans are posted to: the base URL with `/v1/traces`, as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` is read; one that names the path already is kept.
    fn traces_url(base: &str) -> String {
        if base.ends_with("/v1/traces") {
            base.to_owned()
        } else {
            format!("{}/v1/traces", base.trim_end_matches('/'))
        }
    }
}

/// A node's span pipeline: the provider (batching and export) and its tracer.
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: Tracer,
}

impl Traces {
    /// The pipeline `config` asks for, None when it names no endpoint.
    /// Spans carry `service.name` weir and this node's id as
    /// `service.instance.id`. Needs a tokio runtime: export runs on a task.
    pub fn start(config: &TraceConfig, node_id: &str) -> Result<Option<Traces>, String> {
        let Some(base) = &config.otlp_endpoint else {
            return Ok(None);
        };
        let exporter = SpanExporter::builder()
            .with_http()
            .with_endpoint(TraceConfig::traces_url(base))
            .build()
            .map_err(|e| format!("--otlp-endpoint {base}: {e}"))?;
        let processor =
            BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
        let resource = Resource::builder()
            .with_service_name("weir")
            .with_attribute(KeyValue::new("service.instance.id", node_id.to_owned()))
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                config.sample_ratio,
            ))))
            .with_resource(resource)
            .build();
        let tracer = Arc::new(BoxedTracer::new(Box::new(provider.tracer("weir"))));
        Ok(Some(Traces { provider, tracer }))
    }

    pub fn tracer(&self) -> &Tracer {
        &self.tracer
    }

    /// Runs `check` under a span named `edge`, the child of the caller's
    /// `traceparent` when it sent one. An unsampled check runs bare.
    pub async fn edge<F: Future>(
        &self,
        edge: &'static str,
        traceparent: Option<&str>,
        check: F,
    ) -> F::Output {
        let parent = match traceparent.and_then(parse_traceparent) {
            Some(remote) => Context::new().with_remote_span_context(remote),
            None => Context::new(),
        };
        let span = self.tracer.build_with_context(
            SpanBuilder::from_name(edge).with_kind(SpanKind::Server),
            &parent,
        );
        if !span.span_context().is_sampled() {
            return check.await;
        }
        let cx = parent.with_span(span);
        let edge = Edge {
            tracer: self.tracer.clone(),
            cx: cx.clone(),
        };
        let out = within(edge, check).await;
        cx.span().end();
        out
    }

    /// Sends the spans still queued and stops the exporter. The batch
    /// processor answers from its task, so this waits off the runtime's
    /// threads.
    pub async fn shutdown(&self) {
        let provider = self.provider.clone();
        let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
    }
}

impl Drop for Traces {
    /// The provider's last owner shuts it down when dropped, which waits
    /// for the batch task: done on a thread of its own so that a runtime
    /// thread never waits for a task it should be running.
    fn drop(&mut self) {
        let provider = self.provider.clone();
        let _ = std::thread::Builder::new()
            .name("weir-traces-stop".into())
            .spawn(move || drop(provider.shutdown()));
    }
}

/// `check` under an edge span when the node exports traces, else as it is.
pub async fn traced<F: Future>(
    traces: Option<&Traces>,
    edge: &'static str,
    traceparent: impl FnOnce() -> Option<String>,
    check: F,
) -> F::Output {
    match traces {
        None => check.await,
        Some(t) => t.edge(edge, traceparent().as_deref(), check).await,
    }
}

#[cfg(test)]
mod tests {
    use super::TraceConfig;

    #[test]
    fn spans_are_posted_under_v1_traces_of_the_base_url() {
        for (base, url) in [
            ("http://c:4318", "http://c:4318/v1/traces"),
            ("http://c:4318/", "http://c:4318/v1/traces"),
            ("http://c:4318/v1/traces", "http://c:4318/v1/traces"),
        ] {
            assert_eq!(TraceConfig::traces_url(base), url);
        }
    }
}
