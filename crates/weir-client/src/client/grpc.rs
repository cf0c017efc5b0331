//! weir.v1.RateLimiter/Check on the wire: items out, results (or item errors) back.

use std::time::Duration;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::Code;
use weir_core::{CheckError, CheckResponse};
use weir_proto::convert;
use weir_proto::weir::v1::rate_limiter_client::RateLimiterClient;
use weir_proto::weir::v1::{CheckItem, CheckResult};

use crate::error::ClientError;

/// A lazily connected channel: built without I/O, so a client for a node
/// that is down can still be made, and each call reconnects when needed
/// (an open connection to a restarted node would otherwise stay dead).
pub(crate) fn channel(
    url: &str,
    connect_timeout: Duration,
    ca_pem: Option<&[u8]>,
) -> Result<Channel, ClientError> {
    let bad = |e: tonic::transport::Error| ClientError::Endpoint {
        url: url.to_string(),
        reason: e.to_string(),
    };
    let mut endpoint = Endpoint::from_shared(url.to_string()).map_err(bad)?;
    // Checked here, as the HTTP transport checks it, though tonic reads the PEM itself.
    super::tls::extra_roots(url, ca_pem)?;
    if super::tls::is_https(url) {
        let mut tls = ClientTlsConfig::new().with_webpki_roots();
        if let Some(pem) = ca_pem {
            tls = tls.ca_certificate(Certificate::from_pem(pem));
        }
        endpoint = endpoint.tls_config(tls).map_err(bad)?;
    }
    Ok(endpoint
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .connect_lazy())
}

/// One Check call carrying `items`; one answer per item, in order.
pub(crate) async fn call(
    client: &mut RateLimiterClient<Channel>,
    items: Vec<CheckItem>,
    deadline: Duration,
) -> Result<Vec<Result<CheckResponse, ClientError>>, ClientError> {
    let sent = items.len();
    let mut request = tonic::Request::new(weir_proto::weir::v1::CheckRequest { items });
    // Sent as grpc-timeout, so the node can drop work nobody waits for.
    request.set_timeout(deadline);
    let response = tokio::time::timeout(deadline, client.check(request))
        .await
        .map_err(|_| ClientError::Timeout(deadline))?
        .map_err(|s| status_error(&s, deadline))?;
    let results = response.into_inner().results;
    if results.len() != sent {
        return Err(ClientError::Protocol(format!(
            "{} results for {sent} items",
            results.len()
        )));
    }
    Ok(results.into_iter().map(result).collect())
}

fn status_error(status: &tonic::Status, deadline: Duration) -> ClientError {
    match status.code() {
        Code::DeadlineExceeded => ClientError::Timeout(deadline),
        // A whole-call refusal names its field first ("items: ...").
        Code::InvalidArgument => ClientError::InvalidArgument {
            field: status
                .message()
                .split_once(':')
                .map_or("items", |(f, _)| f)
                .to_string(),
            message: status.message().to_string(),
        },
        Code::Unimplemented | Code::Unknown | Code::Internal | Code::OutOfRange => {
            ClientError::Protocol(format!("{}: {}", status.code(), status.message()))
        }
        _ => ClientError::Unavailable(format!("{}: {}", status.code(), status.message())),
    }
}

fn result(r: CheckResult) -> Result<CheckResponse, ClientError> {
    let code = r.error.as_ref().map(|e| e.code);
    match convert::response(r) {
        Some(Ok(answer)) => Ok(answer),
        Some(Err(e)) => Err(ClientError::from(e)),
        None => Err(ClientError::Protocol(format!(
            "unknown item error code {code:?}"
        ))),
    }
}

impl From<CheckError> for ClientError {
    fn from(e: CheckError) -> Self {
        match e {
            CheckError::Unavailable(u) => ClientError::Unavailable(u.to_string()),
            CheckError::Invalid { ref reason, .. } => ClientError::InvalidArgument {
                field: e.field().unwrap_or("request").to_string(),
                message: reason.to_string(),
            },
            CheckError::CostExceedsLimit { .. } => ClientError::InvalidArgument {
                field: "cost".into(),
                message: e.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_proto::weir::v1::{ErrorCode, ItemError};

    #[test]
    fn item_error_names_the_field() {
        let r = CheckResult {
            error: Some(ItemError {
                code: ErrorCode::CostExceedsLimit as i32,
                field: "cost".into(),
                message: "too big".into(),
            }),
            ..CheckResult::default()
        };
        assert_eq!(
            result(r),
            Err(ClientError::InvalidArgument {
                field: "cost".into(),
                message: "too big".into()
            })
        );
    }

    #[test]
    fn unlimited_result_has_no_rule() {
        let r = CheckResult {
            allowed: true,
            ..CheckResult::default()
        };
        let got = result(r).unwrap();
        assert!(got.allowed && !got.limited && got.rule.is_none());
    }

    #[test]
    fn batch_refusal_names_items() {
        let s = tonic::Status::invalid_argument("items: at most 1000 per call, got 1001");
        match status_error(&s, Duration::from_millis(1)) {
            ClientError::InvalidArgument { field, .. } => assert_eq!(field, "items"),
            other => panic!("{other:?}"),
        }
    }
}
