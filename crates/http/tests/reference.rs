//! The HTTP API reference page (`docs/http-reference.md`) is the OpenAPI document's own
//! content: it fails when they drift apart. `DROVER_WRITE_REFERENCE=1` writes the page again
//! instead.

use std::path::Path;

#[test]
fn the_http_reference_page_matches_the_openapi_document() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/http-reference.md");
    let generated = drover_http::reference::markdown();
    if std::env::var_os("DROVER_WRITE_REFERENCE").is_some() {
        std::fs::write(&path, &generated).expect("write docs/http-reference.md");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "docs/http-reference.md differs from the OpenAPI document from line {}: run \
             `DROVER_WRITE_REFERENCE=1 cargo test -p drover-http --test reference` and commit the page",
            line + 1
        );
    }
}

/// Every operation and schema of the document has its section, with its parameters, body and
/// answers; schema names are links to their sections.
#[test]
fn the_http_reference_has_a_section_per_operation_and_schema() {
    let page = drover_http::reference::markdown();
    let doc = serde_json::to_value(drover_http::openapi()).unwrap();
    let mut operations = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let heading = format!("\n### `{} {path}`\n", method.to_uppercase());
            assert!(page.contains(&heading), "{heading}");
            operations += 1;
        }
    }
    assert!(operations >= 18, "{operations} operations");
    for schema in doc["components"]["schemas"].as_object().unwrap().keys() {
        assert!(page.contains(&format!("\n### {schema}\n")), "{schema}");
    }
    for known in [
        "\n### `POST /v1/jobs`\n",
        "\n### `GET /v1/jobs/{id}`\n",
        "\n### `POST /v1/queues/{name}/pause`\n",
        "\n### `GET /v1/ready`\n",
        "\n### EnqueueRequest\n",
        "\n### JobView\n",
        "\n### ErrorBody\n",
        "\n## Schemas\n",
    ] {
        assert!(page.contains(known), "{known}");
    }

    // A parameter with its bounds, a request body, an answer and a field with its rule.
    assert!(page.contains("| `limit` | query | integer | no |"));
    assert!(page.contains(
        "**Request body:** [EnqueueRequest](#enqueuerequest) (`application/json`), required."
    ));
    assert!(page.contains("| 202 | Enqueued and committed | [EnqueueResponse](#enqueueresponse) |"));
    assert!(page.contains("| `priority` | integer or null | no |"));
    assert!(page.contains("minimum -32768; maximum 32767"));
    assert!(page.contains("| `job` | [JobView](#jobview) | yes |"));
    // Routes without a token say so.
    let ready = &page[page.find("### `GET /v1/ready`").unwrap()..];
    assert!(ready.contains("**Token:** none needed."));
    // No rustdoc link (`` [`Name`] ``) is left without a target.
    for (at, _) in page.match_indices("`]") {
        assert!(
            page[at + 2..].starts_with('('),
            "a rustdoc link the page cannot resolve: {}",
            &page[at.saturating_sub(60)..at + 2]
        );
    }
}
