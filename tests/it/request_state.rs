//! What every request carries: the server boxes each handler's future, so its size is copied
//! once per request; heavy state belongs behind the boxes `proxy::handle` makes (BENCHMARKS.md,
//! "Instruction counts"). This guards against that state creeping back inline.

use axum::extract::State;

use crate::support::gateway::TestGateway;

/// Far above today's size and far below the ~12 KB the copies cost when they crept in (twice).
const MAX_HANDLER_FUTURE_BYTES: usize = 4096;

#[tokio::test]
async fn a_requests_handler_future_stays_small() {
    let g = TestGateway::start().await;
    let request = axum::http::Request::post("/v1/messages").body(axum::body::Body::empty()).unwrap();
    let future = ccmesh::proxy::handle(State(g.gw.clone()), request);
    let size = std::mem::size_of_val(&future);
    eprintln!("the proxy handler's future: {size} bytes");
    assert!(size <= MAX_HANDLER_FUTURE_BYTES, "the proxy handler's future is {size} bytes");
}
