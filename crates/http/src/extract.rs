//! Request extractors: the authenticated [`Principal`]; [`JsonBody`], a strict JSON body
//! reader that enforces the size limit (413), the content type (415) and names the offending
//! field of any parse error (400); and [`PathParam`] and [`QueryParams`], which answer a
//! malformed path segment or query string with the API's error shape instead of axum's plain
//! text.

use std::collections::HashMap;

use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use serde::de::DeserializeOwned;

use crate::auth::{AuthMode, Principal};
use crate::error::ApiError;
use crate::ApiState;

/// The caller of a request with `headers` under `state`'s authentication.
///
/// # Errors
/// 401 for a missing, malformed, unknown or repeated bearer token.
fn authenticate(headers: &HeaderMap, state: &ApiState) -> Result<Principal, ApiError> {
    match state.auth() {
        AuthMode::InsecureNoAuth => Ok(Principal::insecure()),
        AuthMode::Tokens(tokens) => {
            // Two credentials are ambiguous: which tenant would the request act for?
            if headers.get_all(header::AUTHORIZATION).iter().count() > 1 {
                return Err(ApiError::unauthorized());
            }
            let value = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .ok_or_else(ApiError::unauthorized)?;
            let (scheme, token) = value.split_once(' ').ok_or_else(ApiError::unauthorized)?;
            if !scheme.eq_ignore_ascii_case("bearer") {
                return Err(ApiError::unauthorized());
            }
            tokens
                .authenticate(token.trim())
                .ok_or_else(ApiError::unauthorized)
        }
    }
}

/// The caller, as [`require_token`] authenticated it before anything else looked at the
/// request (or, on a router without that layer, authenticated here).
impl FromRequestParts<ApiState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        if let Some(principal) = parts.extensions.get::<Principal>() {
            return Ok(principal.clone());
        }
        authenticate(&parts.headers, state)
    }
}

/// Middleware (the outermost route layer, so it runs before the query check and every
/// extractor): authenticates the caller of every operation the OpenAPI document marks with
/// the bearer scheme, and of any route it does not know, and answers 401 before anything
/// else about the request is looked at. An unauthenticated caller learns nothing from the
/// order of the checks: a bad query, body, content type or path answers 401 like a good one.
/// The principal is kept in the request's extensions for the handler's [`Principal`].
pub async fn require_token(
    axum::extract::State(state): axum::extract::State<ApiState>,
    mut request: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;

    if operation_of(&request).is_none_or(|op| op.secured) {
        match authenticate(request.headers(), &state) {
            Ok(principal) => {
                request.extensions_mut().insert(principal);
            }
            Err(e) => return e.into_response(),
        }
    }
    next.run(request).await
}

/// A JSON body parsed into `T`.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

/// A request body type, and the shape its error names when a body is valid JSON of another
/// type (an array, a string, ...).
pub trait RequestBody: DeserializeOwned {
    /// What the body must be, as the error says it: "a JSON object" unless the type says more.
    const SHAPE: &'static str = "a JSON object";
}

impl<T: RequestBody + Send> FromRequest<ApiState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &ApiState) -> Result<Self, ApiError> {
        check_content_type(
            req.headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
        )?;
        check_content_encoding(req.headers())?;
        let limit = state.max_body_bytes();
        // A declared length over the limit is refused before reading anything; a body without
        // one (chunked) is cut off once it passes the limit.
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > limit as u64) {
            return Err(ApiError::too_large(limit));
        }
        let bytes = axum::body::to_bytes(req.into_body(), limit)
            .await
            .map_err(|_| ApiError::too_large(limit))?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// Checks a body's `Content-Type`: `application/json` or `application/*+json`, and a
/// `charset` parameter, if any, of `utf-8` (any case, quoted or not): the body is read as
/// UTF-8, so a body declared in another charset would be misread.
///
/// # Errors
/// 415 for another media type, a missing one, or another charset.
pub fn check_content_type(value: Option<&str>) -> Result<(), ApiError> {
    let mut parts = value.unwrap_or_default().split(';');
    let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
    if !(media == "application/json"
        || (media.starts_with("application/") && media.ends_with("+json")))
    {
        return Err(ApiError::not_json());
    }
    for parameter in parts {
        let (name, charset) = parameter.split_once('=').unwrap_or((parameter, ""));
        if !name.trim().eq_ignore_ascii_case("charset") {
            continue;
        }
        let charset = charset.trim();
        let unquoted = charset
            .strip_prefix('"')
            .and_then(|c| c.strip_suffix('"'))
            .unwrap_or(charset);
        if !unquoted.eq_ignore_ascii_case("utf-8") {
            return Err(ApiError::not_utf8(charset));
        }
    }
    Ok(())
}

/// Checks a body's `Content-Encoding`: none, or only `identity` (RFC 9110 section 8.4). A
/// compressed body would be read as its compressed bytes, and a body declared compressed but
/// sent plain would be accepted under a false header, so both are refused.
///
/// # Errors
/// 415 for any other coding, or a header that is not visible ASCII.
pub fn check_content_encoding(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    for value in headers.get_all(header::CONTENT_ENCODING) {
        let Ok(text) = value.to_str() else {
            return Err(ApiError::encoded_body());
        };
        let plain = text
            .split(',')
            .map(str::trim)
            .all(|coding| coding.is_empty() || coding.eq_ignore_ascii_case("identity"));
        if !plain {
            return Err(ApiError::encoded_body());
        }
    }
    Ok(())
}

/// The one path parameter of a route (`{id}`, `{name}`), percent-decoded.
#[derive(Debug)]
pub struct PathParam(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| PathParam(value))
            .map_err(|_| ApiError::invalid("path", "must be percent-encoded UTF-8"))
    }
}

/// The query string as name/value pairs, in the order the request gives them (so an answer
/// about "the first" parameter is the same every time). A name given twice
/// (`?state=queued&state=failed`) is refused with 400 naming it: no filter here takes a list,
/// and silently keeping one of the values would answer a different question than the one
/// asked.
#[derive(Debug)]
pub struct QueryParams(pub Vec<(String, String)>);

impl QueryParams {
    /// The value of parameter `name`, if given.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.as_str())
    }

    /// The parameter names, in request order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(name, _)| name.as_str())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        // The query decoder replaces bytes that are not UTF-8 with U+FFFD; refuse them instead,
        // so `?state=%ff` is not read as a filter on a state named "\u{FFFD}". Every delimiter
        // is ASCII, so the whole string decodes as UTF-8 exactly when every name and value does.
        if let Some(raw) = parts.uri.query() {
            if percent_encoding::percent_decode_str(raw)
                .decode_utf8()
                .is_err()
            {
                return Err(ApiError::invalid("query", "must be percent-encoded UTF-8"));
            }
        }
        let Query(pairs) = Query::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::invalid("query", "must be a URL-encoded query string"))?;
        let mut seen = std::collections::HashSet::with_capacity(pairs.len());
        if let Some((name, _)) = pairs.iter().find(|(name, _)| !seen.insert(name.as_str())) {
            return Err(ApiError::invalid(
                name.clone(),
                "is given more than once; give each query parameter once",
            ));
        }
        Ok(QueryParams(pairs))
    }
}

/// How a documented operation treats the query string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QueryUse {
    /// It documents query parameters (its handler refuses unknown ones).
    Parameters,
    /// It takes none; `body` when its input is a JSON body.
    Nothing { body: bool },
}

/// What the OpenAPI document says about one operation that the request layers enforce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Operation {
    /// How it treats the query string.
    query: QueryUse,
    /// It lists a security requirement (a bearer token).
    secured: bool,
    /// It documents a request body.
    body: bool,
}

/// Every operation of the OpenAPI document by (lowercase method, path template): read from
/// the document, so what the routes accept and what the document says are one list.
fn operations() -> &'static HashMap<(String, String), Operation> {
    static TABLE: std::sync::OnceLock<HashMap<(String, String), Operation>> =
        std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let doc = serde_json::to_value(crate::openapi_cached()).unwrap_or_default();
        let mut table = HashMap::new();
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            for (method, operation) in item.as_object().into_iter().flatten() {
                let queried = operation["parameters"]
                    .as_array()
                    .is_some_and(|ps| ps.iter().any(|p| p["in"] == "query"));
                let body = !operation["requestBody"].is_null();
                let query = if queried {
                    QueryUse::Parameters
                } else {
                    QueryUse::Nothing { body }
                };
                let secured = operation["security"]
                    .as_array()
                    .is_some_and(|s| !s.is_empty());
                table.insert(
                    (method.clone(), path.clone()),
                    Operation {
                        query,
                        secured,
                        body,
                    },
                );
            }
        }
        table
    })
}

/// The matched route's path template (a route layer sees it), or the request's path.
fn route_path(request: &Request) -> String {
    request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(
            || request.uri().path().to_owned(),
            |p| p.as_str().to_owned(),
        )
}

/// The documented operation a request is routed to; `HEAD` is served by the `GET` route, so
/// it is that operation.
fn operation_of(request: &Request) -> Option<&'static Operation> {
    let method = if request.method() == axum::http::Method::HEAD {
        "get".to_owned()
    } else {
        request.method().as_str().to_ascii_lowercase()
    };
    operations().get(&(method, route_path(request)))
}

/// Middleware (a route layer, so it sees the matched route; it runs after [`require_token`]):
/// refuses any query parameter on a route whose operation documents none, with 400 naming the
/// first parameter (or `query` when its name is not UTF-8 or empty) and the rule. Such a
/// parameter would otherwise be ignored without a word: `POST /v1/jobs?tenant=b` would enqueue
/// for the token's tenant. An empty query (`?`, `?&`) holds no parameter.
pub async fn refuse_query_parameters(
    request: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;

    let Some(query) = request.uri().query() else {
        return next.run(request).await;
    };
    let Some(raw_name) = query
        .split('&')
        .find(|pair| !pair.is_empty())
        .map(|pair| pair.split('=').next().unwrap_or_default())
    else {
        return next.run(request).await;
    };
    let path = route_path(&request);
    let body = match operation_of(&request).map(|op| op.query) {
        Some(QueryUse::Parameters) => return next.run(request).await,
        Some(QueryUse::Nothing { body }) => body,
        None => false,
    };
    let spaced = raw_name.replace('+', " ");
    let name = percent_encoding::percent_decode_str(&spaced).decode_utf8();
    let rule = format!(
        "{} {path} takes no query parameters{}",
        request.method(),
        if body {
            "; give the request's fields in its JSON body"
        } else {
            ""
        }
    );
    let error = match name {
        Ok(name) if !name.is_empty() => ApiError::invalid(
            name.into_owned(),
            format!("is a query parameter, and {rule}"),
        ),
        _ => ApiError::invalid("query", rule),
    };
    error.into_response()
}

/// Middleware (a route layer, after [`require_token`]): refuses a request body on a route
/// whose operation documents none, with 400 naming `body` and the rule. Such a body would
/// otherwise be read by nobody: `POST /v1/jobs/{id}/cancel` with `{"reason": ...}` would
/// cancel as if the reason were kept. An empty body (none, `Content-Length: 0`, or an empty
/// chunked one) is no body.
pub async fn refuse_body(
    request: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::body::HttpBody as _;
    use axum::response::IntoResponse;

    if operation_of(&request).is_none_or(|op| op.body)
        || request.body().size_hint().exact() == Some(0)
    {
        return next.run(request).await;
    }
    let rule = format!(
        "{} {} takes no body",
        request.method(),
        route_path(&request)
    );
    let (parts, body) = request.into_parts();
    // Read at most one byte: any byte is a body to refuse, none lets the request through.
    match axum::body::to_bytes(body, 0).await {
        Ok(_) => {
            let request = Request::from_parts(parts, axum::body::Body::empty());
            next.run(request).await
        }
        Err(_) => ApiError::invalid("body", rule).into_response(),
    }
}

/// A `T` that must be written as a JSON object.
///
/// serde's derived `Deserialize` for a struct also accepts a JSON array of its fields in
/// declaration order (`["email.send", {"to": "x"}]` would read as a request with a kind and
/// args); the API refuses that: request bodies and batch items are objects, or 400 naming
/// them.
#[derive(Debug)]
pub struct Object<T>(pub T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(std::marker::PhantomData<T>);

        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for ObjectVisitor<T> {
            type Value = Object<T>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Object<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Object)
            }
        }

        deserializer.deserialize_map(ObjectVisitor(std::marker::PhantomData))
    }
}

/// Serde helper for a list of objects (`#[serde(deserialize_with = "objects")]`): every
/// element must be a JSON object (see [`Object`]).
///
/// # Errors
/// The deserializer's error for a value that is not an array of objects of `T`.
pub fn objects<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    let items: Vec<Object<T>> = serde::Deserialize::deserialize(deserializer)?;
    Ok(items.into_iter().map(|Object(item)| item).collect())
}

/// Parses `bytes` as `T` written as a JSON object (see [`Object`]), naming the field of the
/// first error (`jobs[2].max_attempts`), or `body` when the text is not JSON at all or not an
/// object.
///
/// # Errors
/// 400 `invalid_input`.
pub fn parse_json<T: RequestBody>(bytes: &[u8]) -> Result<T, ApiError> {
    // A UTF-8 byte order mark is ignored, as RFC 8259 section 8.1 allows (editors on Windows
    // write one at the start of files).
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if std::str::from_utf8(bytes).is_err() {
        return Err(ApiError::invalid("body", "must be UTF-8 JSON"));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let Object(value) = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let at_root = path == "." || path == "?" || path.is_empty();
        // A fault inside a string (a lone surrogate, a bad escape, a raw control character)
        // is a syntax error to serde_json, but it lies in one field's value: name that field.
        let text = std::str::from_utf8(bytes).unwrap_or_default();
        if let Some(fault) = string_fault(&inner, text) {
            // A fault in an object's key leaves the key unknown (`args.?`): name the object.
            let field = match path.strip_suffix(".?") {
                _ if at_root => "body",
                Some(object) => object,
                None => path.as_str(),
            };
            return ApiError::invalid(field, fault);
        }
        let syntax = matches!(
            inner.classify(),
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof
        );
        let at_root = syntax || at_root;
        // Valid JSON of another type than an object: say what the body must be.
        if at_root && !syntax {
            // (serde stops at the first character of another type, so text like `[oops` gets
            // its syntax error, not a type.)
            if let Some(found) = json_type_of(text) {
                return match serde_json::from_str::<serde::de::IgnoredAny>(text) {
                    Ok(_) => {
                        ApiError::invalid("body", format!("must be {}, not {found}", T::SHAPE))
                    }
                    Err(syntax) => ApiError::invalid("body", describe(&syntax)),
                };
            }
        }
        let message = describe(&inner);
        // serde_path_to_error's path already ends with an unknown field's own name; a missing
        // field is reported at its parent, so its name is added here.
        let missing = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.strip_suffix('`'))
            .filter(|_| !syntax);
        let field = match (missing, at_root) {
            (Some(name), true) => name.to_owned(),
            (Some(name), false) => format!("{path}.{name}"),
            (None, true) => "body".to_owned(),
            (None, false) => path,
        };
        ApiError::invalid(field, message)
    })?;
    de.end()
        .map_err(|e| ApiError::invalid("body", describe(&e)))?;
    // Parsed, so the text is UTF-8 JSON; integers beyond 64 bits would be stored altered.
    let text = std::str::from_utf8(bytes).unwrap_or_default();
    if let Err(drover_core::Error::InvalidInput { field, reason }) =
        drover_core::json::check_integer_literals(text, "")
    {
        return Err(ApiError::invalid(field, reason));
    }
    Ok(value)
}

/// The JSON type of a document that is not an object, by its first character ("an array",
/// "a string", ...); `None` for an object (or text that is not JSON: its syntax error says
/// more).
fn json_type_of(text: &str) -> Option<&'static str> {
    match text.trim_start().bytes().next()? {
        b'[' => Some("an array"),
        b'"' => Some("a string"),
        b't' | b'f' => Some("a boolean"),
        b'n' => Some("null"),
        b'-' | b'0'..=b'9' => Some("a number"),
        _ => None,
    }
}

/// What is wrong inside a JSON string, found by [`first_string_fault`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum StringFault {
    /// A `\uXXXX` escape of a UTF-16 surrogate that is not half of a pair (the escape, as
    /// written).
    LoneSurrogate(String),
    /// A backslash not followed by one of JSON's escapes (the escape, as written).
    BadEscape(String),
    /// A character below U+0020 written as itself.
    ControlCharacter(char),
}

/// The first fault inside a string of the JSON text `text`, with its line and column (1-based,
/// in characters, at the backslash or the character), for text that is valid JSON up to there.
fn first_string_fault(text: &str) -> Option<(StringFault, usize, usize)> {
    let hex4 = |s: &str| -> Option<u32> {
        let digits = s.get(..4)?;
        if digits.chars().all(|c| c.is_ascii_hexdigit()) {
            u32::from_str_radix(digits, 16).ok()
        } else {
            None
        }
    };
    let (mut line, mut column) = (1, 0);
    let mut in_string = false;
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        column += 1;
        if !in_string {
            in_string = c == '"';
        } else if c == '"' {
            in_string = false;
        } else if c < ' ' {
            return Some((StringFault::ControlCharacter(c), line, column));
        } else if c == '\\' {
            // `escape` is the text from the backslash on; every escape JSON knows is ASCII.
            let escape = &text[i..];
            // What follows the backslash: a fault, or how many characters the escape holds
            // after it (a \u escape's digits are ASCII that needs no check, except that a
            // pair's second escape must not be read as a lone trailing surrogate).
            let checked = match escape[1..].chars().next() {
                Some('"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't') => Ok(1),
                Some('u') => match hex4(&escape[2..]) {
                    None => Err(StringFault::BadEscape(escape.chars().take(6).collect())),
                    Some(0xDC00..=0xDFFF) => {
                        Err(StringFault::LoneSurrogate(escape[..6].to_owned()))
                    }
                    Some(0xD800..=0xDBFF) => {
                        let paired = escape[6..]
                            .strip_prefix("\\u")
                            .and_then(hex4)
                            .is_some_and(|low| (0xDC00..=0xDFFF).contains(&low));
                        if paired {
                            Ok(11)
                        } else {
                            Err(StringFault::LoneSurrogate(escape[..6].to_owned()))
                        }
                    }
                    Some(_) => Ok(1),
                },
                _ => Err(StringFault::BadEscape(escape.chars().take(2).collect())),
            };
            match checked {
                Err(fault) => return Some((fault, line, column)),
                Ok(after) => {
                    for _ in 0..after {
                        chars.next();
                    }
                    column += after;
                }
            }
        }
        if c == '\n' {
            line += 1;
            column = 0;
        }
    }
    None
}

/// The rule a string of the JSON text `text` broke, when `e` is serde_json's refusal of it of
/// something inside a string (serde_json's own wording names no rule, and misnames some:
/// `lone leading surrogate in hex escape` for a lone trailing surrogate, `unexpected end of hex
/// escape` for a leading one followed by no escape): what is wrong, where (line and column, in
/// characters), and what JSON allows instead. `None` for any other error. Used for request
/// bodies, the `meta` filter, and the CLI's `--args` and `--meta`.
pub fn string_fault(e: &serde_json::Error, text: &str) -> Option<String> {
    if e.classify() != serde_json::error::Category::Syntax {
        return None;
    }
    let reason = serde_reason(e);
    if ![
        "surrogate",
        "hex escape",
        "invalid escape",
        "control character",
    ]
    .iter()
    .any(|word| reason.contains(word))
    {
        return None;
    }
    let (fault, line, column) = first_string_fault(text)?;
    Some(match fault {
        StringFault::LoneSurrogate(escape) => format!(
            "must be Unicode text, but {escape} (line {line}, column {column}) is a lone UTF-16 \
             surrogate; surrogate escapes come only in pairs, one of \\ud800-\\udbff followed at \
             once by one of \\udc00-\\udfff (or write the character itself)"
        ),
        StringFault::BadEscape(escape) => format!(
            "is not valid JSON: {escape} (line {line}, column {column}) is not an escape JSON \
             knows; use \\\" \\\\ \\/ \\b \\f \\n \\r \\t or \\u followed by 4 hex digits"
        ),
        StringFault::ControlCharacter(c) => format!(
            "is not valid JSON: the control character U+{:04X} (line {line}, column {column}) \
             must be escaped inside a string (\\u{:04x}, or \\n, \\t, \\r for those)",
            u32::from(c),
            u32::from(c)
        ),
    })
}

/// The nesting rule, when `e` is serde_json's refusal of text nested deeper than its parser
/// goes (128 levels: "recursion limit exceeded"): such text is valid JSON, and the rule it
/// breaks is Drover's own, at most [`JSON_DEPTH_MAX`](drover_core::json::JSON_DEPTH_MAX) levels
/// (`json::check_value`), which is what the caller is told. `None` for any other error. Used
/// for request bodies, job files and the CLI's `--args` and `--meta`.
pub fn depth_fault(e: &serde_json::Error) -> Option<String> {
    use drover_core::json::JSON_DEPTH_MAX;
    serde_reason(e)
        .starts_with("recursion limit exceeded")
        .then(|| {
            format!(
                "nests arrays and objects more than {JSON_DEPTH_MAX} deep; the limit is \
             {JSON_DEPTH_MAX}"
            )
        })
}

/// A serde_json error without its position suffix noise, lowercase.
fn describe(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    if let Some(fault) = depth_fault(e) {
        return fault;
    }
    match e.classify() {
        // serde_json's own reason says what is wrong: "number out of range", "recursion limit
        // exceeded" (nesting deeper than 128), "EOF while parsing an object", ...
        Category::Syntax | Category::Eof => format!(
            "is not valid JSON: {} (line {}, column {})",
            serde_reason(e),
            e.line(),
            e.column()
        ),
        Category::Data | Category::Io => serde_reason(e),
    }
}

/// A serde_json error's message without its ` at line L column C` suffix.
pub(crate) fn serde_reason(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dto::{BatchEnqueueRequest, EnqueueRequest};

    fn field_of<T: RequestBody + std::fmt::Debug>(body: &str) -> String {
        let err = parse_json::<T>(body.as_bytes()).unwrap_err();
        let json = serde_json::to_value(crate::error::ErrorBody {
            error: err_detail(err),
        })
        .unwrap();
        json["error"]["field"].as_str().unwrap_or("").to_owned()
    }

    fn err_detail(e: ApiError) -> crate::error::ErrorDetail {
        use axum::response::IntoResponse;
        let response = e.into_response();
        let body = futures_body(response);
        serde_json::from_value::<serde_json::Value>(body)
            .map(|v| crate::error::ErrorDetail {
                code: v["error"]["code"].as_str().unwrap().to_owned(),
                message: v["error"]["message"].as_str().unwrap().to_owned(),
                field: v["error"]["field"].as_str().map(str::to_owned),
                details: None,
            })
            .unwrap()
    }

    fn futures_body(response: axum::response::Response) -> serde_json::Value {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap();
            serde_json::from_slice(&bytes).unwrap()
        })
    }

    /// The field and message of refusing `body` as an `EnqueueRequest`.
    fn refusal(body: &str) -> (String, String) {
        let e = parse_json::<EnqueueRequest>(body.as_bytes()).unwrap_err();
        assert_eq!(e.status().as_u16(), 400, "{body}");
        assert_eq!(e.code(), "invalid_input", "{body}");
        (
            e.field().unwrap_or_default().to_owned(),
            e.message().to_owned(),
        )
    }

    /// A body nested deeper than the parser goes is told Drover's depth rule, not serde_json's
    /// "recursion limit exceeded" (it is valid JSON).
    #[test]
    fn a_body_nested_past_the_parser_is_told_the_depth_rule() {
        for depth in [128, 129, 1000] {
            let body = format!(
                r#"{{"kind": "a", "args": {}{}}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            );
            let (field, message) = refusal(&body);
            assert_eq!(field, "body");
            assert_eq!(
                message,
                "invalid body: nests arrays and objects more than 100 deep; the limit is 100",
                "{depth}"
            );
        }
    }

    #[test]
    fn lone_surrogates_name_their_field_position_and_rule() {
        let rule = "is a lone UTF-16 surrogate; surrogate escapes come only in pairs, one of \
                    \\ud800-\\udbff followed at once by one of \\udc00-\\udfff (or write the \
                    character itself)";
        for (body, field, escape, column) in [
            (r#"{"kind": "a\ud800"}"#, "kind", r"\ud800", 12),
            (r#"{"kind": "\ud800\u0041"}"#, "kind", r"\ud800", 11),
            (r#"{"kind": "\uDBFF\uD800"}"#, "kind", r"\uDBFF", 11),
            (
                r#"{"kind": "a", "args": {"text": "x\ud800y"}}"#,
                "args.text",
                r"\ud800",
                34,
            ),
            (
                r#"{"kind": "a", "args": {"list": [1, "\udc00"]}}"#,
                "args.list[1]",
                r"\udc00",
                37,
            ),
            (
                r#"{"kind": "a", "args": {"k\ud800": 1}}"#,
                "args",
                r"\ud800",
                26,
            ),
            (r#"{"k\ud800ind": "a"}"#, "body", r"\ud800", 4),
            (
                r#"{"kind": "a", "meta": {"a": "\ud800\n"}}"#,
                "meta.a",
                r"\ud800",
                30,
            ),
            (
                r#"{"kind": "a", "limit_keys": ["x", "\ud800"]}"#,
                "limit_keys[1]",
                r"\ud800",
                36,
            ),
            (
                r#"{"kind": "a", "queue": "\udfff"}"#,
                "queue",
                r"\udfff",
                25,
            ),
            // A pair before the lone one is fine; the position is the lone one's.
            (
                r#"{"kind": "a", "args": {"ok": "\ud83d\ude00", "bad": "\udc00"}}"#,
                "args.bad",
                r"\udc00",
                54,
            ),
            (
                "{\"kind\": \"a\",\n \"args\": \"\u{e9}\\ud800\"}",
                "args",
                r"\ud800",
                12,
            ),
        ] {
            let (got_field, message) = refusal(body);
            assert_eq!(got_field, field, "{body}: {message}");
            assert_eq!(
                message,
                format!(
                    "invalid {field}: must be Unicode text, but {escape} (line {}, column \
                     {column}) {rule}",
                    if body.contains('\n') { 2 } else { 1 }
                ),
                "{body}"
            );
        }
        let e = parse_json::<BatchEnqueueRequest>(
            br#"{"jobs": [{"kind": "a"}, {"kind": "b", "args": ["\ud800"]}]}"#,
        )
        .unwrap_err();
        assert_eq!(e.field(), Some("jobs[1].args[0]"), "{}", e.message());
        assert!(
            e.message().contains("lone UTF-16 surrogate"),
            "{}",
            e.message()
        );
        // Pairs, in any case, are characters.
        let request: EnqueueRequest =
            parse_json(br#"{"kind": "a", "args": {"s": "\ud83d\ude00\uD83D\uDE00"}}"#).unwrap();
        assert_eq!(request.args.unwrap()["s"], "\u{1f600}\u{1f600}");
    }

    #[test]
    fn other_faults_inside_strings_name_their_field_and_rule() {
        let (field, message) = refusal(r#"{"kind": "\x"}"#);
        assert_eq!(field, "kind");
        assert_eq!(
            message,
            r#"invalid kind: is not valid JSON: \x (line 1, column 11) is not an escape JSON knows; use \" \\ \/ \b \f \n \r \t or \u followed by 4 hex digits"#
        );
        let (field, message) = refusal(r#"{"kind": "a", "args": {"s": "\u12G4"}}"#);
        assert_eq!(field, "args.s");
        assert!(
            message.contains(r"\u12G4 (line 1, column 30) is not an escape"),
            "{message}"
        );
        let (field, message) = refusal("{\"kind\": \"a\", \"args\": [\"a\tb\"]}");
        assert_eq!(field, "args[0]");
        assert_eq!(
            message,
            r"invalid args[0]: is not valid JSON: the control character U+0009 (line 1, column 26) must be escaped inside a string (\u0009, or \n, \t, \r for those)"
        );
        // Faults outside strings keep serde_json's reason, at the body.
        let (field, message) = refusal(r#"{"kind": "a",}"#);
        assert_eq!(field, "body");
        assert!(
            message.starts_with("invalid body: is not valid JSON: "),
            "{message}"
        );
    }

    #[test]
    fn a_body_declared_compressed_is_refused_with_415() {
        use axum::http::{HeaderMap, HeaderValue};
        let with = |values: &[&str]| {
            let mut headers = HeaderMap::new();
            for v in values {
                headers.append(header::CONTENT_ENCODING, HeaderValue::from_str(v).unwrap());
            }
            check_content_encoding(&headers)
        };
        assert!(with(&[]).is_ok());
        assert!(with(&["identity"]).is_ok());
        assert!(with(&["Identity, identity"]).is_ok());
        for refused in [
            &["gzip"][..],
            &["br"],
            &["identity, gzip"],
            &["identity", "deflate"],
        ] {
            let e = with(refused).unwrap_err();
            assert_eq!(e.status().as_u16(), 415, "{refused:?}");
            assert!(e.message().contains("uncompressed"), "{refused:?}");
        }
    }

    #[test]
    fn a_leading_byte_order_mark_is_ignored() {
        let body = b"\xEF\xBB\xBF{\"kind\": \"a\"}";
        let request: EnqueueRequest = parse_json(body).unwrap();
        assert_eq!(request.kind, "a");
        // Only at the start: elsewhere it is not JSON whitespace.
        assert_eq!(
            field_of::<EnqueueRequest>("{\"kind\": \"a\"}\u{feff}"),
            "body"
        );
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(
            field_of::<EnqueueRequest>(r#"{"kind": "a", "bogus": 1}"#),
            "bogus"
        );
        assert_eq!(
            field_of::<BatchEnqueueRequest>(r#"{"jobs": [{"kind": "a", "x": 1}]}"#),
            "jobs[0].x"
        );
        assert_eq!(
            field_of::<EnqueueRequest>(r#"{"kind": "a", "max_attempts": "x"}"#),
            "max_attempts"
        );
        assert_eq!(
            field_of::<EnqueueRequest>(r#"{"kind": "a", "priority": 1.5}"#),
            "priority"
        );
        assert_eq!(field_of::<EnqueueRequest>(r#"{"kind": 5}"#), "kind");
        assert_eq!(field_of::<EnqueueRequest>(r#"["a", {}]"#), "body");
        assert_eq!(field_of::<EnqueueRequest>(r#"{}"#), "kind");
        assert_eq!(
            field_of::<BatchEnqueueRequest>(r#"{"jobs": [{"kind": "a"}, {"args": {}}]}"#),
            "jobs[1].kind"
        );
        assert_eq!(field_of::<BatchEnqueueRequest>(r#"{}"#), "jobs");
        assert_eq!(field_of::<EnqueueRequest>(r#"null"#), "body");
        assert_eq!(
            field_of::<BatchEnqueueRequest>(r#"{"jobs": [{"kind": "a"}, ["b"]]}"#),
            "jobs[1]"
        );
        assert_eq!(
            field_of::<BatchEnqueueRequest>(r#"{"jobs": {"kind": "a"}}"#),
            "jobs"
        );
        assert_eq!(field_of::<EnqueueRequest>(r#"{"kind": "a""#), "body");
        assert_eq!(
            field_of::<BatchEnqueueRequest>(
                r#"{"jobs": [{"kind": "a"}, {"kind": "b", "max_attempts": 1e40}]}"#
            ),
            "jobs[1].max_attempts"
        );
    }

    #[test]
    fn a_body_of_another_json_type_is_told_the_shape_it_must_have() {
        for (body, found) in [
            (r#"[{"kind": "a"}]"#, "an array"),
            (" \n[]", "an array"),
            (r#""jobs""#, "a string"),
            ("true", "a boolean"),
            ("null", "null"),
            ("-1", "a number"),
            ("12", "a number"),
        ] {
            let e = parse_json::<BatchEnqueueRequest>(body.as_bytes()).unwrap_err();
            assert_eq!(e.field(), Some("body"), "{body}: {}", e.message());
            assert_eq!(
                e.message(),
                format!(
                    r#"invalid body: must be a JSON object {{"jobs": [...]}} whose jobs are objects like POST /v1/jobs takes, not {found}"#
                ),
                "{body}"
            );
            let e = parse_json::<EnqueueRequest>(body.as_bytes()).unwrap_err();
            assert_eq!(
                e.message(),
                format!("invalid body: must be a JSON object, not {found}"),
                "{body}"
            );
        }
        // An object keeps its own answers (a missing field is named), and text that is not
        // JSON its syntax error.
        let e = parse_json::<BatchEnqueueRequest>(b"{}").unwrap_err();
        assert_eq!(e.field(), Some("jobs"), "{}", e.message());
        let e = parse_json::<BatchEnqueueRequest>(b"[oops").unwrap_err();
        assert!(e.message().contains("is not valid JSON"), "{}", e.message());
    }
}
