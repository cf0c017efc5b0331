//! The example's ordering: a flood stopped per IP costs no credential lookups; the tight limit is per client.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use weir_client::FailureMode;
use weir_examples::{app, in_process, layers, App, RULES};

async fn serve(app: App) -> (SocketAddr, App) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = app.router.clone();
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    (addr, app)
}

fn get(http: &reqwest::Client, addr: SocketAddr, token: Option<&str>) -> reqwest::RequestBuilder {
    let req = http.get(format!("http://{addr}/"));
    match token {
        Some(t) => req.bearer_auth(t),
        None => req,
    }
}

#[tokio::test]
async fn a_flood_refused_per_ip_never_reaches_authentication() {
    // The shipped rules, with the per-IP floor shrunk so a test can cross it.
    let rules = RULES.replace("limit     = 1000", "limit     = 5");
    let (pre, post) = layers(in_process(&rules).unwrap(), FailureMode::Open);
    let (addr, app) = serve(app(pre, post)).await;
    let http = reqwest::Client::new();
    let mut statuses = Vec::new();
    for _ in 0..20 {
        statuses.push(
            get(&http, addr, None)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses[..5], [401; 5]);
    assert_eq!(statuses[5..], [429; 15]);
    assert_eq!(
        app.auth_lookups.load(Ordering::SeqCst),
        5,
        "a request refused before authentication cost a credential lookup"
    );
}

#[tokio::test]
async fn each_client_gets_ten_a_minute_after_authentication() {
    let (pre, post) = layers(in_process(RULES).unwrap(), FailureMode::Open);
    let (addr, app) = serve(app(pre, post)).await;
    let http = reqwest::Client::new();
    for n in 0..10 {
        let res = get(&http, addr, Some("token-alice")).send().await.unwrap();
        assert_eq!(res.status(), 200);
        // The tighter, per-client limit is the one shown.
        assert_eq!(res.headers()["ratelimit-limit"], "10");
        assert_eq!(
            res.headers()["ratelimit-remaining"],
            (9 - n).to_string().as_str()
        );
        assert_eq!(res.text().await.unwrap(), "hello, alice\n");
    }
    let res = get(&http, addr, Some("token-alice")).send().await.unwrap();
    assert_eq!(res.status(), 429);
    assert!(res.headers().contains_key("retry-after"));
    // A client id sent by the caller is ignored: authentication decides it.
    let res = get(&http, addr, Some("token-bob"))
        .header("x-client-id", "alice")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.text().await.unwrap(), "hello, bob\n");
    assert_eq!(app.auth_lookups.load(Ordering::SeqCst), 12);
}
