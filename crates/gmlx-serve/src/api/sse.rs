//! Response bodies: a whole JSON document, or server-sent events fed from a channel.
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::{Body as HttpBody, Frame};
use hyper::Response;
use tokio::sync::mpsc::Receiver;

pub type Body = BoxBody<Bytes, Infallible>;

/// A body whose chunks come from a channel; dropping it (the client went away) closes the
/// channel, which is how the producer learns to stop.
pub struct ChannelBody(pub Receiver<Bytes>);

impl HttpBody for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// One SSE event carrying `value` as JSON.
pub fn event(value: &impl serde::Serialize) -> Bytes {
    let json = serde_json::to_string(value).unwrap_or_else(|_| "{}".to_owned());
    Bytes::from(format!("data: {json}\n\n"))
}

pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// Ends a stream that failed: the error as an event, then `[DONE]`.
pub async fn end_with_error(tx: &tokio::sync::mpsc::Sender<Bytes>, e: &crate::error::Error) {
    let _ = tx.send(event(&e.body())).await;
    let _ = tx.send(Bytes::from_static(DONE)).await;
}

pub fn json(status: u16, value: &impl serde::Serialize) -> Response<Body> {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(bytes)).boxed());
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// A whole plain-text body (the caller sets its content type).
pub fn text(status: u16, text: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(text)).boxed());
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
    r
}

pub fn stream(rx: Receiver<Bytes>) -> Response<Body> {
    let mut r = Response::new(BodyExt::boxed(ChannelBody(rx)));
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-cache"),
    );
    r
}
