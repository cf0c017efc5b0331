//! Which caller a request counts against, and which route it is.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::ConnectInfo;
use http::request::Parts;
use http::HeaderName;
use tonic::transport::server::TcpConnectInfo;

/// A caller's own key reader.
pub type KeyFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// Reads the caller key from a request.
#[derive(Clone)]
pub enum KeyExtractor {
    /// The value of a request header: an API key, or the client id an
    /// authentication middleware in front of this layer has set. A request
    /// without it is refused with 400 naming the header.
    Header(HeaderName),
    /// The peer's IP address, for the pre-authentication limit.
    /// Read from axum's `ConnectInfo<SocketAddr>`, tonic's `TcpConnectInfo`
    /// or a bare `SocketAddr` extension; it is also sent as the check's `ip`
    /// so `by = "ip"` rules apply.
    PeerIp,
    /// Anything else; `None` refuses the request with 400.
    Fn(KeyFn),
}

impl KeyExtractor {
    /// The key from a request header; a request without it is refused
    /// with 400 naming the header.
    ///
    /// ```
    /// use weir_client::KeyExtractor;
    ///
    /// let by_api_key = KeyExtractor::header("x-api-key");
    /// // Anything else: the client id an authentication layer put in the
    /// // request's extensions, say; None refuses the request with 400.
    /// #[derive(Clone)]
    /// struct ClientId(String);
    /// let by_client = KeyExtractor::from_fn(|parts| {
    ///     parts.extensions.get::<ClientId>().map(|c| c.0.clone())
    /// });
    /// # let _ = (by_api_key, by_client);
    /// ```
    ///
    /// # Panics
    /// When `name` is not a valid header name: a configuration mistake
    /// found at start-up, not per request.
    pub fn header(name: &str) -> Self {
        KeyExtractor::Header(HeaderName::try_from(name).expect("a valid header name"))
    }

    pub fn from_fn(f: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static) -> Self {
        KeyExtractor::Fn(Arc::new(f))
    }
}

impl fmt::Debug for KeyExtractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyExtractor::Header(h) => f.debug_tuple("Header").field(h).finish(),
            KeyExtractor::PeerIp => f.write_str("PeerIp"),
            KeyExtractor::Fn(_) => f.write_str("Fn(..)"),
        }
    }
}

/// Why no key could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// The caller sent no usable key: its fault, so a 400.
    Missing { field: String, detail: String },
    /// The server was not set up to record peer addresses: the service's
    /// fault, so a 500 and never a silent shared key.
    NoPeerAddress,
}

/// The key, and the IP to send alongside it (only for [`KeyExtractor::PeerIp`]).
pub(crate) fn extract(
    key: &KeyExtractor,
    parts: &Parts,
) -> Result<(String, Option<String>), KeyError> {
    match key {
        KeyExtractor::Header(name) => {
            let missing = |what: &str| KeyError::Missing {
                field: "key".into(),
                detail: format!("header {name} {what}"),
            };
            let value = parts
                .headers
                .get(name)
                .ok_or_else(|| missing("is required"))?
                .to_str()
                .map_err(|_| missing("must be visible ASCII"))?;
            if value.is_empty() {
                return Err(missing("must not be empty"));
            }
            Ok((value.to_string(), None))
        }
        KeyExtractor::PeerIp => {
            let ip = peer_ip(parts).ok_or(KeyError::NoPeerAddress)?.to_string();
            Ok((ip.clone(), Some(ip)))
        }
        KeyExtractor::Fn(f) => f(parts)
            .map(|k| (k, None))
            .ok_or_else(|| KeyError::Missing {
                field: "key".into(),
                detail: "the request carries no caller key".into(),
            }),
    }
}

/// The peer address whichever server recorded it.
pub fn peer_ip(parts: &Parts) -> Option<IpAddr> {
    let ext = &parts.extensions;
    if let Some(ConnectInfo(addr)) = ext.get::<ConnectInfo<SocketAddr>>() {
        return Some(canonical(addr.ip()));
    }
    if let Some(info) = ext.get::<TcpConnectInfo>() {
        return info.remote_addr().map(|a| canonical(a.ip()));
    }
    ext.get::<SocketAddr>().map(|a| canonical(a.ip()))
}

/// An IPv4 client on a dual-stack socket arrives as `::ffff:a.b.c.d`; it
/// must count against the same key as when it arrives as `a.b.c.d`.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// `"METHOD /path"`, the route format rules are written in; the query
/// string is left out so `?page=2` does not escape a route's limit.
pub(crate) fn default_route(parts: &Parts) -> String {
    let method = parts.method.as_str();
    let path = parts.uri.path();
    let mut route = String::with_capacity(method.len() + 1 + path.len());
    route.push_str(method);
    route.push(' ');
    route.push_str(path);
    route
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(req: http::Request<()>) -> Parts {
        req.into_parts().0
    }

    #[test]
    fn header_key_is_read_and_missing_is_refused_naming_it() {
        let k = KeyExtractor::header("x-client-id");
        let p = parts(
            http::Request::builder()
                .header("x-client-id", "cust_42")
                .body(())
                .unwrap(),
        );
        assert_eq!(extract(&k, &p), Ok(("cust_42".into(), None)));
        let p = parts(http::Request::new(()));
        match extract(&k, &p) {
            Err(KeyError::Missing { field, detail }) => {
                assert_eq!(field, "key");
                assert!(detail.contains("x-client-id"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn peer_ip_reads_connect_info_and_unmaps_v4() {
        let mut p = parts(http::Request::new(()));
        assert_eq!(
            extract(&KeyExtractor::PeerIp, &p),
            Err(KeyError::NoPeerAddress)
        );
        let addr: SocketAddr = "[::ffff:203.0.113.9]:4000".parse().unwrap();
        p.extensions.insert(ConnectInfo(addr));
        assert_eq!(
            extract(&KeyExtractor::PeerIp, &p),
            Ok(("203.0.113.9".into(), Some("203.0.113.9".into())))
        );
    }

    #[test]
    fn route_leaves_out_the_query() {
        let p = parts(http::Request::post("/v1/charges?x=1").body(()).unwrap());
        assert_eq!(default_route(&p), "POST /v1/charges");
    }
}
