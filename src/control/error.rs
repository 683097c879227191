//! API errors: an HTTP status and a JSON body `{"error": "...", "field": "..."}`.
//!
//! * 400: a bad body; `field` names the offending key (`weight`, `rlat`, `min`, ...)
//!   whenever one can be named, and the message starts with it.
//! * 404: no group or volume of that name, or no such route.
//! * 500: the change was valid but could not be persisted (it was then not applied).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub field: Option<String>,
    pub message: String,
}

impl ApiError {
    /// 400 naming `field`; the message is prefixed with it.
    pub fn field(field: &str, message: impl std::fmt::Display) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            field: Some(field.to_owned()),
            message: format!("{field}: {message}"),
        }
    }

    /// 400 about the body as a whole.
    pub fn body(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            field: None,
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            field: None,
            message: message.into(),
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            field: None,
            message: message.into(),
        }
    }

    /// 409: the change conflicts with the state of others (reservations over what may be
    /// reserved).
    pub fn conflict(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::CONFLICT,
            field: None,
            message: message.into(),
        }
    }

    /// A refusal of the QoS core: 409 for over-committed reservations, else 400 (naming
    /// the key of an invalid configuration).
    pub fn from_qos(e: crate::qos::QosError) -> Self {
        use crate::qos::QosError;
        match e {
            QosError::Overcommitted { .. } => Self::conflict(e.to_string()),
            QosError::InvalidConfig(message) => Self::from_validation(&message),
            other => Self::body(other.to_string()),
        }
    }

    /// A config validation message such as `device.qos.min: must be <= max`: the key
    /// after the last dot before the colon becomes the field.
    pub fn from_validation(message: &str) -> Self {
        let key = message.split(':').next().unwrap_or("");
        let field = key.rsplit('.').next().unwrap_or(key).trim();
        let rest = message
            .split_once(':')
            .map(|(_, r)| r.trim())
            .unwrap_or(message);
        if field.is_empty() || field.contains(' ') {
            Self::body(message)
        } else {
            Self::field(field, rest)
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = Map::new();
        body.insert("error".into(), Value::String(self.message));
        if let Some(f) = self.field {
            body.insert("field".into(), Value::String(f));
        }
        (self.status, axum::Json(Value::Object(body))).into_response()
    }
}

/// Parse a JSON object body into `T` (whose fields must all be optional or defaulted).
/// On failure the error names the first key that is rejected on its own: an unknown key,
/// a wrong type or an out-of-range value.
pub fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::body(format!("the body is not valid JSON: {e}")))?;
    let Value::Object(map) = &value else {
        return Err(ApiError::body("the body must be a JSON object"));
    };
    match serde_json::from_value::<T>(value.clone()) {
        Ok(t) => Ok(t),
        Err(whole) => {
            for (key, v) in map {
                let one = json!({ key.as_str(): v.clone() });
                if let Err(e) = serde_json::from_value::<T>(one) {
                    return Err(ApiError::field(key, e));
                }
            }
            Err(ApiError::body(whole.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qos::QosConfig;

    #[test]
    fn body_errors_name_the_field() {
        let e = parse_body::<QosConfig>(br#"{"rlat": -5, "min": 10}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("rlat"), "{e:?}");
        assert!(e.message.contains("negative"), "{e:?}");
        let e = parse_body::<QosConfig>(br#"{"latency": 5}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("latency"));
        let e = parse_body::<QosConfig>(b"[1]").unwrap_err();
        assert_eq!(e.field, None);
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        let q = parse_body::<QosConfig>(br#"{"rlat": "5ms"}"#).unwrap();
        assert_eq!(q.rlat, Some(crate::duration::DurationUs(5000)));
    }

    #[test]
    fn validation_messages_map_to_fields() {
        let e = ApiError::from_validation("device.qos.min: must be <= max (got 5 > 4)");
        assert_eq!(e.field.as_deref(), Some("min"));
        assert_eq!(e.message, "min: must be <= max (got 5 > 4)");
    }
}
