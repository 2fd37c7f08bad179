//! Method + path → handler, after the API key check.
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response};

use crate::access::Access;
use crate::api::{self, sse::Body};
use crate::error::{Error, Result};
use crate::state::State;

pub async fn route(state: &State, req: Request<Incoming>) -> Response<Body> {
    let access = Access::new(req.method().as_str(), req.uri().path());
    let origin = allowed_origin(state, &req);
    let mut response = if req.method() == Method::OPTIONS {
        preflight(&req, origin.is_some())
    } else {
        match dispatch(state, req, &access).await {
            Ok(r) => r,
            Err(e) => error_response(&e),
        }
    };
    if let Some(origin) = origin {
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(header::VARY, HeaderValue::from_static("Origin"));
    }
    // a generation's line is written when its events end; every other request's now
    if !access.is_tracked() {
        access.finish(response.status().as_u16());
    }
    response
}

/// The request's `Origin` when `server.cors_origins` allows it (`*` allows any).
fn allowed_origin(state: &State, req: &Request<Incoming>) -> Option<HeaderValue> {
    let origin = req.headers().get(header::ORIGIN)?;
    let text = origin.to_str().ok()?;
    let allowed = &state.config().cors_origins;
    allowed
        .iter()
        .any(|o| o == "*" || o == text)
        .then(|| origin.clone())
}

/// A CORS preflight: 204 with the methods and headers the API takes when the origin is
/// allowed (never needs the key: browsers send none with it); a bare 204 otherwise.
fn preflight(req: &Request<Incoming>, allowed: bool) -> Response<Body> {
    let mut r = api::sse::text(204, String::new());
    if allowed {
        let headers = r.headers_mut();
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        let asked = req
            .headers()
            .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
            .cloned()
            .unwrap_or_else(|| HeaderValue::from_static("authorization, content-type"));
        headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
        headers.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
    }
    r
}

pub fn error_response(e: &Error) -> Response<Body> {
    let mut r = api::sse::json(e.status(), &e.body());
    if let Some(s) = e.retry_after_s() {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

async fn dispatch(
    state: &State,
    req: Request<Incoming>,
    access: &Access,
) -> Result<Response<Body>> {
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let method = req.method().clone();
    if path != "/health" {
        authorize(state, &req)?;
        if !state.is_ready() {
            return Err(Error::Loading);
        }
    }
    match (&method, path.as_str()) {
        (&Method::GET, "/health") => Ok(api::health(state)),
        (&Method::GET, "/v1/models") => Ok(api::models(state)),
        (&Method::GET, "/v1/metrics") => Ok(api::metrics(state)),
        (&Method::GET, "/metrics") => Ok(api::prometheus(state)),
        (&Method::GET, p) if p.starts_with("/v1/models/") => {
            api::model(state, &p["/v1/models/".len()..])
        }
        (&Method::POST, "/tokenize") => {
            let body = read_body(state, req).await?;
            api::tokenize(state, body)
        }
        (&Method::POST, "/detokenize") => {
            let body = read_body(state, req).await?;
            api::detokenize(state, body)
        }
        (&Method::POST, "/v1/chat/completions") => {
            let body = read_body(state, req).await?;
            api::chat(state, body, access).await
        }
        (&Method::POST, "/v1/completions") => {
            let body = read_body(state, req).await?;
            api::completion(state, body, access).await
        }
        _ => Err(Error::NotFound {
            method: method.to_string(),
            path,
        }),
    }
}

fn authorize(state: &State, req: &Request<Incoming>) -> Result<()> {
    let Some(key) = state.config().api_key.clone() else {
        return Ok(());
    };
    let given = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(g) if constant_time_eq(g.as_bytes(), key.as_bytes()) => Ok(()),
        _ => Err(Error::Unauthorized),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn read_body(state: &State, req: Request<Incoming>) -> Result<Bytes> {
    let limit_bytes = state.config().max_body_bytes;
    let declared = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit_bytes) {
        return Err(Error::BodyTooLarge { limit_bytes });
    }
    match Limited::new(req.into_body(), limit_bytes).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            Err(Error::BodyTooLarge { limit_bytes })
        }
        Err(e) => Err(Error::BadJson {
            reason: format!("reading the body: {e}"),
        }),
    }
}
