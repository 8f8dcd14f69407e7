//! The command-line reference page (`docs/cli-reference.md`) is the binary's own definitions:
//! it fails when they drift apart. `DROVER_WRITE_REFERENCE=1` writes the page again instead.

use std::path::Path;

#[test]
fn the_cli_reference_page_matches_the_binary() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/cli-reference.md");
    let generated = drover_cli::reference::markdown();
    if std::env::var_os("DROVER_WRITE_REFERENCE").is_some() {
        std::fs::write(&path, &generated).expect("write docs/cli-reference.md");
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
            "docs/cli-reference.md differs from the clap definitions from line {}: run \
             `DROVER_WRITE_REFERENCE=1 cargo test -p drover-cli --test reference` and commit the page",
            line + 1
        );
    }
}

/// Every command of the binary has its section, and hidden ones none.
#[test]
fn the_cli_reference_has_a_section_per_command() {
    let page = drover_cli::reference::markdown();
    for heading in [
        "## `drover`",
        "## `drover jobs list`",
        "## `drover worker`",
        "## `drover workflows get`",
        "## `drover schedules add`",
    ] {
        assert!(page.contains(&format!("\n{heading}\n")), "{heading}");
    }
    assert!(page.contains("`DROVER_DATABASE_URL`"));
    assert!(!page.contains("`--help`"), "clap's own flags are left out");
}
