//! The steps of a migration file: marker lines `-- drover:step locking` and
//! `-- drover:step online` split it; see the migrator's module documentation.

use sha2::{Digest, Sha256};

use drover_core::Error;

/// The marker that starts a step: `-- drover:step locking` or `-- drover:step online`.
const STEP_MARKER: &str = "-- drover:step";

/// One migration compiled into this binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// Its number (the `NNNN` of `NNNN_name.sql`), strictly increasing.
    pub version: i64,
    /// Its name (the file name without number and extension).
    pub name: &'static str,
    /// The SQL text.
    pub sql: &'static str,
}

/// How a step runs; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// In one transaction with a short `lock_timeout`, tried again until the lock budget is
    /// spent.
    Locking,
    /// One statement outside a transaction block, whose locks let job reads and writes go
    /// on; it may wait for them up to the lock budget.
    Online,
}

/// One step of a migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// How it runs.
    pub kind: StepKind,
    /// Its SQL (the text after its marker line).
    pub sql: &'static str,
}

impl Migration {
    /// SHA-256 (lowercase hex) of the SQL text, stored when applied and checked afterwards.
    pub fn checksum(&self) -> String {
        hex::encode(Sha256::digest(self.sql.as_bytes()))
    }

    /// The steps of the file: one locking step when it has no marker line.
    ///
    /// # Errors
    /// [`Error::Fatal`] for a malformed file: SQL before the first marker, an unknown step
    /// kind, an empty step, an online step with more than one statement, or an online
    /// `CREATE INDEX` that is not `CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS name`.
    pub fn steps(&self) -> Result<Vec<Step>, Error> {
        let malformed = |rule: String| {
            Error::fatal(format!(
                "migration {} ({}) is malformed: {rule}",
                self.version, self.name
            ))
        };
        let mut steps = Vec::new();
        // (kind, byte offset where the step's SQL starts)
        let mut open: Option<(StepKind, usize)> = None;
        let mut offset = 0;
        for line in self.sql.split_inclusive('\n') {
            let trimmed = line.trim();
            if let Some(rest) = trimmed.strip_prefix(STEP_MARKER) {
                let kind = match rest.trim() {
                    "locking" => StepKind::Locking,
                    "online" => StepKind::Online,
                    other => {
                        return Err(malformed(format!(
                            "unknown step kind {other:?} (locking or online)"
                        )))
                    }
                };
                match open {
                    Some((kind, start)) => steps.push(Step {
                        kind,
                        sql: &self.sql[start..offset],
                    }),
                    None if !only_comments(&self.sql[..offset]) => {
                        return Err(malformed("SQL before the first step marker".to_owned()))
                    }
                    None => {}
                }
                open = Some((kind, offset + line.len()));
            }
            offset += line.len();
        }
        match open {
            Some((kind, start)) => steps.push(Step {
                kind,
                sql: &self.sql[start..],
            }),
            None => steps.push(Step {
                kind: StepKind::Locking,
                sql: self.sql,
            }),
        }
        for (number, step) in steps.iter().enumerate() {
            let number = number + 1;
            if only_comments(step.sql) {
                return Err(malformed(format!("step {number} has no SQL")));
            }
            if step.kind == StepKind::Online {
                let statement = code_of(step.sql);
                let statement = statement.trim().trim_end_matches(';');
                if statement.contains(';') {
                    return Err(malformed(format!(
                        "online step {number} must be one statement"
                    )));
                }
                let words: Vec<String> = statement
                    .split_whitespace()
                    .take(3)
                    .map(str::to_ascii_uppercase)
                    .collect();
                let creates_index = words.first().is_some_and(|w| w == "CREATE")
                    && words[1..].iter().take(2).any(|w| w == "INDEX");
                if creates_index && step.index_built().is_none() {
                    return Err(malformed(format!(
                        "online step {number} must build its index with CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS name"
                    )));
                }
            }
        }
        Ok(steps)
    }
}

impl Step {
    /// The name of the index an online step builds with `CREATE [UNIQUE] INDEX CONCURRENTLY IF
    /// NOT EXISTS name`; `None` for any other step.
    pub fn index_built(&self) -> Option<String> {
        if self.kind != StepKind::Online {
            return None;
        }
        let code = code_of(self.sql);
        let words: Vec<&str> = code.split_whitespace().take(9).collect();
        let upper: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
        if upper.first()? != "CREATE" {
            return None;
        }
        let start = if upper.get(1)? == "UNIQUE" { 2 } else { 1 };
        let pattern = ["INDEX", "CONCURRENTLY", "IF", "NOT", "EXISTS"];
        for (offset, want) in pattern.iter().enumerate() {
            if upper.get(start + offset)? != want {
                return None;
            }
        }
        let name = words.get(start + pattern.len())?.trim_matches('"');
        let plain = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        plain.then(|| name.to_owned())
    }
}

/// The text without `--` comment lines.
fn code_of(sql: &str) -> String {
    sql.lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `sql` holds nothing but blank lines and `--` comments.
fn only_comments(sql: &str) -> bool {
    code_of(sql).trim().is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn migration(sql: &'static str) -> Migration {
        Migration {
            version: 9,
            name: "test",
            sql,
        }
    }

    #[test]
    fn a_file_without_markers_is_one_locking_step() {
        let m = migration("-- comment\nCREATE TABLE t (a int);\nCREATE TABLE u (a int);\n");
        assert_eq!(
            m.steps().unwrap(),
            vec![Step {
                kind: StepKind::Locking,
                sql: m.sql
            }]
        );
    }

    #[test]
    fn markers_split_a_file_into_steps() {
        let m = migration(
            "-- header\n\n-- drover:step locking\nALTER TABLE t ADD c int;\n-- drover:step online\nCREATE INDEX CONCURRENTLY IF NOT EXISTS t_c_idx ON drover.t (c);\n-- drover:step online\n-- why\nALTER TABLE drover.t VALIDATE CONSTRAINT x;\n",
        );
        let steps = m.steps().unwrap();
        assert_eq!(
            steps.iter().map(|s| s.kind).collect::<Vec<_>>(),
            vec![StepKind::Locking, StepKind::Online, StepKind::Online]
        );
        assert_eq!(steps[0].sql, "ALTER TABLE t ADD c int;\n");
        assert_eq!(steps[1].index_built().as_deref(), Some("t_c_idx"));
        assert_eq!(steps[2].index_built(), None);
        assert_eq!(steps[0].index_built(), None);
    }

    #[test]
    fn a_unique_online_index_is_recognised() {
        let m = migration(
            "-- drover:step online\ncreate unique index concurrently if not exists u_idx on drover.t (c);\n",
        );
        assert_eq!(
            m.steps().unwrap()[0].index_built().as_deref(),
            Some("u_idx")
        );
    }

    #[test]
    fn malformed_files_are_refused_with_the_rule() {
        let cases = [
            (
                "CREATE TABLE t (a int);\n-- drover:step locking\nSELECT 1;\n",
                "before the first step marker",
            ),
            ("-- drover:step later\nSELECT 1;\n", "unknown step kind"),
            (
                "-- drover:step locking\n-- nothing\n-- drover:step online\nSELECT 1;\n",
                "step 1 has no SQL",
            ),
            (
                "-- drover:step online\nSELECT 1; SELECT 2;\n",
                "one statement",
            ),
            (
                "-- drover:step online\nCREATE INDEX t_idx ON drover.t (c);\n",
                "CONCURRENTLY IF NOT EXISTS",
            ),
            (
                "-- drover:step online\nCREATE INDEX CONCURRENTLY t_idx ON drover.t (c);\n",
                "CONCURRENTLY IF NOT EXISTS",
            ),
        ];
        for (sql, rule) in cases {
            let error = migration(sql).steps().unwrap_err().to_string();
            assert!(error.contains("migration 9 (test) is malformed"), "{error}");
            assert!(error.contains(rule), "{sql}: {error}");
        }
    }
}
