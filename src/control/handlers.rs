//! The HTTP routes: thin wrappers that parse the body, call [`Control`] and encode the
//! answer. The route table is built through [`Routes`], which records every
//! (method, path) it registers, so a test can hold the served routes against
//! `docs/openapi.json` in both directions.

use super::api::{GroupPatch, VolumePatch};
use super::context::Control;
use super::error::{parse_body, ApiError};
use super::filter::VolumeFilter;
use super::metrics;
use crate::cost_model::ModelConfig;
use crate::qos::QosConfig;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::handler::Handler;
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter};
use axum::{Json, Router};
use std::sync::Arc;

type Ctx = State<Arc<Control>>;

/// A router plus the list of what it serves.
pub struct Routes {
    router: Router<Arc<Control>>,
    list: Vec<(&'static str, &'static str)>,
}

impl Routes {
    fn new() -> Self {
        Routes {
            router: Router::new(),
            list: Vec::new(),
        }
    }

    fn add<H, T>(mut self, method: &'static str, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, Arc<Control>>,
        T: 'static,
    {
        let filter = match method {
            "GET" => MethodFilter::GET,
            "PUT" => MethodFilter::PUT,
            "PATCH" => MethodFilter::PATCH,
            "POST" => MethodFilter::POST,
            _ => MethodFilter::DELETE,
        };
        self.router = self.router.route(path, on(filter, handler));
        self.list.push((method, path));
        self
    }

    /// `(method, path)` of every route, paths in axum syntax (`/v1/groups/{name}`, the
    /// same as OpenAPI's). Read by the test that holds docs/openapi.json to the routes.
    #[cfg(test)]
    pub fn list(&self) -> &[(&'static str, &'static str)] {
        &self.list
    }

    pub fn into_router(self, ctl: Arc<Control>) -> Router {
        self.router.fallback(fallback).with_state(ctl)
    }
}

/// Every route of the API.
pub fn routes() -> Routes {
    Routes::new()
        .add("GET", "/v1/device", get_device)
        .add("PUT", "/v1/device/qos", put_qos)
        .add("GET", "/v1/device/model", get_model)
        .add("PUT", "/v1/device/model", put_model)
        .add("GET", "/v1/groups", get_groups)
        .add("POST", "/v1/groups", post_group)
        .add("GET", "/v1/groups/{name}", get_group)
        .add("PATCH", "/v1/groups/{name}", patch_group)
        .add("DELETE", "/v1/groups/{name}", delete_group)
        .add("GET", "/v1/volumes", get_volumes)
        .add("POST", "/v1/volumes", post_volume)
        .add("GET", "/v1/volumes/{name}", get_volume)
        .add("PATCH", "/v1/volumes/{name}", patch_volume)
        .add("DELETE", "/v1/volumes/{name}", delete_volume)
        .add("POST", "/v1/volumes/{name}/reset", reset_volume)
        .add("GET", "/v1/stats", get_stats)
        .add("GET", "/metrics", get_metrics)
}

/// The metrics listener's one route: `GET /metrics` (other methods: 405).
pub fn metrics_router(ctl: Arc<Control>) -> axum::Router {
    Router::new()
        .route("/metrics", axum::routing::get(get_metrics))
        .fallback(metrics_fallback)
        .with_state(ctl)
}

async fn metrics_fallback(method: Method, uri: Uri) -> ApiError {
    ApiError::not_found(format!(
        "no such route: {method} {}: this listener serves GET /metrics only",
        uri.path()
    ))
}

async fn fallback(method: Method, uri: Uri) -> ApiError {
    ApiError::not_found(format!("no such route: {method} {}", uri.path()))
}

async fn get_device(State(c): Ctx) -> Response {
    Json(c.device()).into_response()
}

async fn put_qos(State(c): Ctx, body: Bytes) -> Result<Response, ApiError> {
    let q: QosConfig = parse_body(&body)?;
    Ok(Json(c.put_qos(q)?).into_response())
}

async fn get_model(State(c): Ctx) -> Response {
    Json(c.model()).into_response()
}

async fn put_model(State(c): Ctx, body: Bytes) -> Result<Response, ApiError> {
    let m: ModelConfig = parse_body(&body)?;
    Ok(Json(c.put_model(m)?).into_response())
}

async fn get_groups(State(c): Ctx) -> Response {
    Json(c.groups()).into_response()
}

async fn get_group(State(c): Ctx, Path(name): Path<String>) -> Result<Response, ApiError> {
    Ok(Json(c.group(&name)?).into_response())
}

async fn patch_group(
    State(c): Ctx,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    // 404 before 400: an unknown name is reported even with a bad body.
    c.group(&name)?;
    let p: GroupPatch = parse_body(&body)?;
    Ok(Json(c.patch_group(&name, p)?).into_response())
}

async fn get_volumes(State(c): Ctx) -> Response {
    Json(c.volumes()).into_response()
}

async fn get_volume(State(c): Ctx, Path(name): Path<String>) -> Result<Response, ApiError> {
    Ok(Json(c.volume(&name)?).into_response())
}

/// `POST /v1/volumes/{name}/reset` takes no keys: its body is read (a client still
/// sending it is not cut off) and must be empty or `{}`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NoKeys {}

async fn reset_volume(
    State(c): Ctx,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    if !body.trim_ascii().is_empty() {
        let NoKeys {} = parse_body(&body)?;
    }
    let v = blocking(move || c.reset_volume(&name)).await?;
    Ok(Json(v).into_response())
}

async fn patch_volume(
    State(c): Ctx,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    c.volume(&name)?;
    let p: VolumePatch = parse_body(&body)?;
    let keys = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&body)
        .map_or(0, |m| m.len());
    if p.size.is_some() && keys > 1 {
        // Growing cannot be undone if a later key were refused: it goes alone.
        return Err(ApiError::field(
            "size",
            "send size in a PATCH of its own (growing a volume cannot be undone if another key is refused)",
        ));
    }
    if let Some(size) = p.size {
        // Growing a file may allocate it: off the runtime's thread.
        let (c, name) = (c.clone(), name.clone());
        blocking(move || c.resize_volume(&name, size.0)).await?;
    }
    Ok(Json(c.patch_volume(&name, p)?).into_response())
}

/// Runs `op` off the runtime's one thread: adding a volume may create and allocate its
/// file, removing one waits for its requests.
async fn blocking<T: Send + 'static>(
    op: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(op)
        .await
        .map_err(|e| ApiError::internal(format!("the operation did not finish: {e}")))?
}

async fn post_volume(State(c): Ctx, body: Bytes) -> Result<Response, ApiError> {
    let view = blocking(move || c.add_volume(&body)).await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// A DELETE takes no body; one sent anyway is read (`_body`) so that closing the
/// connection does not reset it under the client before it has the answer.
async fn delete_volume(
    State(c): Ctx,
    Path(name): Path<String>,
    uri: Uri,
    _body: Bytes,
) -> Result<Response, ApiError> {
    let force = force_of(uri.query())?;
    blocking(move || c.remove_volume(&name, force)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `?force=true` (or `false`); nothing else is accepted.
fn force_of(query: Option<&str>) -> Result<bool, ApiError> {
    match query.unwrap_or("") {
        "" | "force=false" => Ok(false),
        "force=true" => Ok(true),
        other => Err(ApiError::field(
            "force",
            format!("the only query is force=true or force=false (got {other:?})"),
        )),
    }
}

async fn post_group(State(c): Ctx, body: Bytes) -> Result<Response, ApiError> {
    let view = c.add_group(&body)?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

async fn delete_group(
    State(c): Ctx,
    Path(name): Path<String>,
    _body: Bytes,
) -> Result<Response, ApiError> {
    c.remove_group(&name)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn get_stats(State(c): Ctx, uri: Uri) -> Result<Response, ApiError> {
    let filter = VolumeFilter::parse(uri.query())?;
    Ok(Json(c.stats(&filter)).into_response())
}

async fn get_metrics(State(c): Ctx, uri: Uri) -> Result<Response, ApiError> {
    let filter = VolumeFilter::parse(uri.query())?;
    let text = metrics::render(&c, &filter).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        text,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The OpenAPI document lists exactly the routes the server serves.
    #[test]
    fn openapi_matches_the_routes() {
        let text = include_str!("../../docs/openapi.json");
        let doc: serde_json::Value = serde_json::from_str(text).expect("docs/openapi.json parses");
        let mut documented = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("path item").keys() {
                if ["get", "put", "patch", "post", "delete"].contains(&method.as_str()) {
                    documented.insert((method.to_uppercase(), path.clone()));
                }
            }
        }
        let served: BTreeSet<(String, String)> = routes()
            .list()
            .iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        let undocumented: Vec<_> = served.difference(&documented).collect();
        let unserved: Vec<_> = documented.difference(&served).collect();
        assert!(
            undocumented.is_empty(),
            "served but not in docs/openapi.json: {undocumented:?}"
        );
        assert!(
            unserved.is_empty(),
            "in docs/openapi.json but not served: {unserved:?}"
        );
    }
}
