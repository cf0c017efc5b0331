//! How a gateway's calls go onto its connection.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut};
use prost::encoding::{DecodeContext, WireType};
use prost::DecodeError;
use tokio::net::{TcpListener, TcpStream};
use weir_proto::weir::v1::DecideRequest;

use super::{Kind, Live};

/// Long enough for anything here; the test waits it out only on failure.
const DEADLINE: Duration = Duration::from_secs(10);

/// A message whose encoding says it has begun, then waits to be let go.
#[derive(Debug, Default)]
struct Held {
    begun: Option<mpsc::SyncSender<()>>,
    go: Option<Arc<parking_lot::Mutex<mpsc::Receiver<()>>>>,
}

impl prost::Message for Held {
    fn encode_raw(&self, _: &mut impl BufMut) {
        if let (Some(begun), Some(go)) = (&self.begun, &self.go) {
            let _ = begun.send(());
            let _ = go.lock().recv_timeout(DEADLINE);
        }
    }

    fn merge_field(
        &mut self,
        _: u32,
        _: WireType,
        _: &mut impl Buf,
        _: DecodeContext,
    ) -> Result<(), DecodeError> {
        unreachable!("only encoded")
    }

    fn encoded_len(&self) -> usize {
        0
    }

    fn clear(&mut self) {}
}

/// A live connection to a loopback peer that reads and drops what it gets.
async fn live() -> Arc<Live> {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut peer, _) = listener.accept().await.unwrap();
        let _ = tokio::io::copy(&mut peer, &mut tokio::io::sink()).await;
    });
    let tcp = TcpStream::connect(addr).await.unwrap();
    Live::start(super::Socket::Plain(tcp), DEADLINE)
}

/// Guard: a frame of copies is encoded before the connection's queue is
/// locked. A ring change's frames take milliseconds to encode, and under
/// the lock every Decide call sent meanwhile waited for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decide_call_is_sent_while_a_frame_of_copies_is_encoded() {
    let live = live().await;
    let (begun, encoding) = mpsc::sync_channel(1);
    let (let_go, go) = mpsc::channel();
    let copies = Held {
        begun: Some(begun),
        go: Some(Arc::new(parking_lot::Mutex::new(go))),
    };
    let copying = {
        let live = live.clone();
        std::thread::spawn(move || live.send(1, Kind::Replicate, &copies))
    };
    encoding
        .recv_timeout(DEADLINE)
        .expect("the copies' encoding began");
    let (sent, deciding) = mpsc::channel();
    let decide = {
        let live = live.clone();
        std::thread::spawn(move || {
            live.send(2, Kind::Decide, &DecideRequest::default());
            let _ = sent.send(());
        })
    };
    let decided = deciding.recv_timeout(DEADLINE);
    let _ = let_go.send(());
    copying.join().unwrap();
    decide.join().unwrap();
    assert!(
        decided.is_ok(),
        "the Decide call waited for the copies' encoding"
    );
}
