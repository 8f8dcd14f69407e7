//! Route handlers, one module per resource. Each handler carries a `#[utoipa::path]` so the
//! OpenAPI document is generated from the code that serves it.

pub mod audit;
pub mod jobs;
pub mod queues;
pub mod system;
pub mod workflows;
