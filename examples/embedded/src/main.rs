//! An application binary that embeds Drover (docs/embedding.md): it defines its own handler with
//! typed args, and gets every `drover` command (`worker`, `enqueue`, `jobs`, `dev`, `serve`,
//! `migrate`, ...) in a few lines.
//!
//! ```bash
//! cargo run -p drover-example-embedded -- dev --jobs examples/embedded/jobs.jsonl
//! cargo run -p drover-example-embedded -- --database-url $URL worker --queue default
//! cargo run -p drover-example-embedded -- --database-url $URL enqueue invoice.render --args '{"invoice_id": 42, "pages": 3}'
//! ```

use std::time::Duration;

use drover::{JobContext, JobKind, Outcome, Registry};
use serde::Deserialize;
use serde_json::json;

/// The args of `invoice.render`, deserialized by Drover before the handler runs; a job whose
/// args do not match fails at once (no retry) with a message naming the problem.
#[derive(Debug, Deserialize)]
struct RenderInvoice {
    invoice_id: u64,
    pages: u32,
}

async fn render_invoice(ctx: JobContext, args: RenderInvoice) -> Outcome {
    for page in 1..=args.pages {
        if ctx.is_cancelled() {
            return Outcome::cancelled("stopped between pages");
        }
        ctx.step("render", json!({"page": page, "of": args.pages}));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Outcome::success_with(json!({
        "invoice_id": args.invoice_id,
        "pdf": format!("invoices/{}.pdf", args.invoice_id),
    }))
}

fn main() -> std::process::ExitCode {
    let mut registry = Registry::new();
    registry.register_typed(
        JobKind::parse("invoice.render").expect("valid kind"),
        render_invoice,
    );
    drover::cli::run(registry)
}
