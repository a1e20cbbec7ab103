//! Errors as OpenAI shapes them: an HTTP status and
//! `{"error": {"message", "type", "param", "code"}}`, the body every OpenAI client
//! knows how to read (the official Python client raises `BadRequestError`,
//! `RateLimitError`, … from it). Every refusal of the server is one of these.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An error answer: status, OpenAI's error object, and an optional `Retry-After`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong and what to do, for a person.
    pub message: String,
    /// OpenAI's error type (`invalid_request_error`, `rate_limit_error`, …).
    pub kind: &'static str,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    /// A short machine-readable code (`model_not_found`, `context_length_exceeded`, …).
    pub code: Option<&'static str>,
    /// Seconds the client should wait before trying again (429, 503).
    pub retry_after: Option<u64>,
}

/// The JSON body of an error.
#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400: the request is malformed or asks for something out of range.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 about one field.
    pub fn invalid_param(param: &str, message: impl Into<String>) -> ApiError {
        ApiError::invalid(message).with_param(param)
    }

    /// 401: missing or wrong API key.
    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "missing or incorrect API key: send it as 'Authorization: Bearer KEY' (the key given to lucent serve --api-key)",
        )
        .with_code("invalid_api_key")
    }

    /// 404: no such model loaded.
    pub fn model_not_found(model: &str, loaded: &[String]) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!(
                "the model '{model}' is not served here; this server has: {}",
                loaded.join(", ")
            ),
        )
        .with_param("model")
        .with_code("model_not_found")
    }

    /// 404: no such route.
    pub fn not_found(path: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!(
                "no route {path}; lucent serves /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, \
                 /tokenize, /detokenize, /health and /metrics"
            ),
        )
        .with_code("not_found")
    }

    /// 413: the body is larger than the server accepts.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!(
                "the request body is larger than this server accepts ({limit} bytes; lucent serve --max-body)"
            ),
        )
        .with_code("request_too_large")
    }

    /// 429: every slot is busy and the queue is full.
    pub fn overloaded(model: &str, slots: usize, queue: usize, retry_after: u64) -> ApiError {
        ApiError {
            retry_after: Some(retry_after),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                format!(
                    "'{model}' is busy: {} generating and {} \
                     (lucent serve --parallel, --max-queue); retry after {retry_after} s",
                    match slots {
                        1 => "its one slot is".to_string(),
                        n => format!("all {n} slots are"),
                    },
                    match queue {
                        1 => "1 request already waits".to_string(),
                        n => format!("{n} requests already wait"),
                    },
                ),
            )
            .with_code("rate_limit_exceeded")
        }
    }

    /// 503: the server is still loading its models or is shutting down.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError {
            retry_after: Some(1),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message)
                .with_code("unavailable")
        }
    }

    /// 504: the request ran past the server's per-request timeout.
    pub fn timeout(secs: f64) -> ApiError {
        ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "timeout_error",
            format!("the request took longer than this server's limit of {secs} s (lucent serve --timeout)"),
        )
        .with_code("timeout")
    }

    /// 500: something failed inside (the message says what).
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// This error about request field `param`.
    pub fn with_param(mut self, param: &str) -> ApiError {
        self.param = Some(param.to_string());
        self
    }

    /// This error with machine-readable `code`.
    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    /// The `{"error": …}` object.
    pub fn body(&self) -> serde_json::Value {
        serde_json::to_value(Body {
            error: Inner {
                message: &self.message,
                kind: self.kind,
                param: self.param.as_deref(),
                code: self.code,
            },
        })
        .unwrap_or_default()
    }
}

impl From<lucent::Error> for ApiError {
    /// A library error on a request's input (a prompt too long, a bad range) is the
    /// request's fault: 400 with the library's message.
    fn from(e: lucent::Error) -> ApiError {
        match e {
            lucent::Error::Io { .. } => ApiError::internal(e.to_string()),
            other => ApiError::invalid(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_objects_have_openai_shape() {
        let e = ApiError::invalid_param("temperature", "temperature must be in [0, 2], got 3");
        assert_eq!(
            e.body(),
            serde_json::json!({"error": {"message": "temperature must be in [0, 2], got 3",
                "type": "invalid_request_error", "param": "temperature", "code": null}})
        );
        let r = ApiError::overloaded("smollm2", 4, 8, 2).into_response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
    }
}
