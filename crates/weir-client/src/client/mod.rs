//! [`Client`]: checks against a weir node over gRPC (batched) or HTTP, each with a deadline.

mod batch;
mod grpc;
mod http;
mod tls;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use weir_core::{
    CheckError, CheckRequest, CheckResponse, Clock, Decide, Nanos, SystemClock, Unavailable,
};

use crate::error::ClientError;
use batch::{BatchConfig, Pending};
use http::HttpTransport;

/// 50 ms: a limiter check sits on every request's path, so a caller that
/// cannot get an answer quickly is better off failing open or closed than
/// adding latency (the check must fit the latency budget).
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(50);
/// Items per gRPC call; well under a node's default ceiling of 1000.
pub const DEFAULT_MAX_BATCH: usize = 256;
/// 5 s: half a node's default `--header-read-timeout`, after which the
/// node closes a kept-alive HTTP/1 connection with no request on it. A
/// check written to a connection as the node closes it fails, and the
/// client cannot tell whether it was counted, so the pool lets go first.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// A handle to one weir node. Cheap to clone; every clone shares one
/// connection (gRPC channel or HTTP pool) and, for gRPC, one batch queue.
///
/// ```no_run
/// use std::time::Duration;
/// use weir_client::{CheckRequest, Client, ClientError};
///
/// # async fn run() -> Result<(), ClientError> {
/// let client = Client::grpc("http://127.0.0.1:8081")?;
/// let answer = client.check(CheckRequest::new("cust_42", "POST /v1/charges")).await?;
/// if answer.allowed {
///     println!("{} left of {}", answer.remaining, answer.limit);
/// } else {
///     println!("retry in {:?}", answer.retry_after);
/// }
///
/// // Over HTTP, with a deadline of its own and a node's self-signed certificate.
/// let client = Client::builder()
///     .deadline(Duration::from_millis(20))
///     .ca_certificate_pem(std::fs::read("node-cert.pem").unwrap())
///     .http("https://weir.internal:8080")?;
/// match client.check(CheckRequest::new("cust_42", "GET /").cost(2)).await {
///     Ok(answer) => println!("allowed: {}", answer.allowed),
///     // Unreachable or too slow: fail open or closed, never as a 429.
///     Err(ClientError::Unavailable(_) | ClientError::Timeout(_)) => {}
///     Err(e) => return Err(e),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    transport: Transport,
    deadline: Duration,
}

enum Transport {
    Grpc(mpsc::Sender<Pending>),
    Http(HttpTransport),
}

/// Options for a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    deadline: Duration,
    connect_timeout: Option<Duration>,
    max_batch: usize,
    max_in_flight: usize,
    queue: usize,
    idle_timeout: Duration,
    ca_pem: Option<Vec<u8>>,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            deadline: DEFAULT_DEADLINE,
            connect_timeout: None,
            max_batch: DEFAULT_MAX_BATCH,
            // A few calls in flight keep one slow batch from holding up the
            // next; more would only shrink batches.
            max_in_flight: 4,
            queue: 4096,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            ca_pem: None,
        }
    }
}

impl ClientBuilder {
    /// How long [`Client::check`] waits for a verdict, queueing included.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// How long a (re)connection may take; defaults to the deadline.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Most checks carried by one gRPC call.
    pub fn max_batch(mut self, max: usize) -> Self {
        self.max_batch = max;
        self
    }

    /// Most gRPC calls outstanding at once.
    pub fn max_in_flight(mut self, max: usize) -> Self {
        self.max_in_flight = max;
        self
    }

    /// Checks waiting for a call before [`Client::check`] itself waits.
    pub fn queue(mut self, depth: usize) -> Self {
        self.queue = depth;
        self
    }

    /// How long an HTTP connection with no check on it is kept for the
    /// next one. Keep it under the node's `--header-read-timeout`.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// PEM certificates to trust for an `https://` node besides the public
    /// roots: a node's self-signed `--tls-cert`, or the CA that signed it.
    /// Given with an `http://` URL, or holding no certificate, the builder
    /// refuses it with [`ClientError::Endpoint`].
    pub fn ca_certificate_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// A client for a node's gRPC address (`http://127.0.0.1:8081`, or
    /// `https://` for a node serving TLS). Makes no
    /// connection yet: a node that is down shows up as
    /// [`ClientError::Unavailable`] on the first check, not here. Must be
    /// called inside a tokio runtime (it starts the batching task).
    pub fn grpc(self, url: &str) -> Result<Client, ClientError> {
        let channel = grpc::channel(
            url,
            self.connect_timeout.unwrap_or(self.deadline),
            self.ca_pem.as_deref(),
        )?;
        let tx = batch::spawn(
            channel,
            BatchConfig {
                max_batch: self.max_batch,
                max_in_flight: self.max_in_flight,
                queue: self.queue,
            },
        );
        Ok(self.build(Transport::Grpc(tx)))
    }

    /// A client for a node's HTTP address (`http://127.0.0.1:8080`, or
    /// `https://`); one `POST /v1/check` per check over a pooled keep-alive
    /// connection.
    pub fn http(self, url: &str) -> Result<Client, ClientError> {
        let t = HttpTransport::new(
            url,
            self.connect_timeout.unwrap_or(self.deadline),
            self.idle_timeout,
            self.ca_pem.as_deref(),
        )?;
        Ok(self.build(Transport::Http(t)))
    }

    fn build(self, transport: Transport) -> Client {
        Client {
            inner: Arc::new(Inner {
                transport,
                deadline: self.deadline,
            }),
        }
    }
}

impl Client {
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// [`ClientBuilder::grpc`] with the default options.
    pub fn grpc(url: &str) -> Result<Client, ClientError> {
        ClientBuilder::default().grpc(url)
    }

    /// [`ClientBuilder::http`] with the default options.
    pub fn http(url: &str) -> Result<Client, ClientError> {
        ClientBuilder::default().http(url)
    }

    pub fn deadline(&self) -> Duration {
        self.inner.deadline
    }

    /// One check within the client's deadline.
    pub async fn check(&self, req: CheckRequest) -> Result<CheckResponse, ClientError> {
        self.check_within(req, self.inner.deadline).await
    }

    /// One check within `deadline`. A malformed request is refused here,
    /// naming the field, without a round trip.
    pub async fn check_within(
        &self,
        req: CheckRequest,
        deadline: Duration,
    ) -> Result<CheckResponse, ClientError> {
        req.validate()?;
        match &self.inner.transport {
            Transport::Http(_) if req.limit.is_some() => Err(ClientError::InvalidArgument {
                field: "limit".into(),
                message: "a carried limit needs the gRPC API".into(),
            }),
            Transport::Http(t) => t.check(&req, deadline).await,
            Transport::Grpc(queue) => {
                let (reply, answer) = oneshot::channel();
                let pending = Pending {
                    item: weir_proto::convert::item(&req),
                    deadline,
                    reply,
                };
                let wait = async {
                    queue
                        .send(pending)
                        .await
                        .map_err(|_| ClientError::Unavailable("client shut down".into()))?;
                    answer
                        .await
                        .map_err(|_| ClientError::Unavailable("check dropped unanswered".into()))?
                };
                tokio::time::timeout(deadline, wait)
                    .await
                    .map_err(|_| ClientError::Timeout(deadline))?
            }
        }
    }
}

/// A remote node as a [`Decide`]: what the tower layer and the simulator
/// use. Reset times come back as unix times, so they are read against this
/// process's wall clock.
impl Decide for Client {
    async fn decide(&self, req: &CheckRequest) -> Result<CheckResponse, CheckError> {
        self.check(req.clone()).await.map_err(CheckError::from)
    }

    fn now(&self) -> Nanos {
        SystemClock::new().now()
    }
}

impl From<ClientError> for CheckError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::InvalidArgument { field, message } => {
                match weir_core::InputField::parse(&field) {
                    Some(f) => CheckError::invalid(f, message),
                    // A whole-call refusal ("items: ..."): the limiter, not
                    // this request, is at odds with the client.
                    None => Unavailable::Unreachable(message).into(),
                }
            }
            ClientError::Timeout(d) => Unavailable::Timeout(d).into(),
            other => Unavailable::Unreachable(other.to_string()).into(),
        }
    }
}
