//! The HTTP API reference page (`docs/http-reference.md`), rendered from the OpenAPI document
//! ([`crate::openapi`]) so it cannot drift from the routes: a test compares the committed page
//! with [`markdown`] and fails when they differ.
//!
//! The document is walked as JSON, the form `/v1/openapi.json` serves. Its maps are sorted by
//! key, so paths and fields appear in that order.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde_json::{Map, Value};

/// The methods an OpenAPI path item may hold, in the order the specification lists them.
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// The prefix of a reference to a component schema.
const SCHEMA_REF: &str = "#/components/schemas/";

/// The whole reference page: an introduction, the operations grouped by tag (in the order the
/// document lists its tags; within a tag, path order, then method), then every component
/// schema.
pub fn markdown() -> String {
    let doc = serde_json::to_value(crate::openapi()).unwrap_or_default();
    let page = Page::new(&doc);
    page.render()
}

/// One operation of the document.
#[derive(Clone, Copy)]
struct Operation<'a> {
    method: &'a str,
    path: &'a str,
    /// The operation object.
    spec: &'a Value,
}

impl<'a> Operation<'a> {
    /// Its first tag, which decides its section.
    fn tag(&self) -> Option<&'a str> {
        self.spec["tags"][0].as_str()
    }
}

/// The operations of one tag.
struct Group<'a> {
    title: String,
    description: &'a str,
    operations: Vec<Operation<'a>>,
}

struct Page<'a> {
    doc: &'a Value,
    /// Names of the component schemas, for links.
    schemas: BTreeSet<&'a str>,
}

impl<'a> Page<'a> {
    fn new(doc: &'a Value) -> Self {
        let schemas = object(&doc["components"]["schemas"])
            .map(|schemas| schemas.keys().map(String::as_str).collect())
            .unwrap_or_default();
        Page { doc, schemas }
    }

    fn render(&self) -> String {
        let mut page = String::from(
            "# HTTP API reference\n\n\
             Every operation of the HTTP API and every schema of its bodies, as the OpenAPI \
             document served at `/v1/openapi.json` describes them (this page is generated from \
             that document, which is built from the route handlers in `crates/http/src/routes/` \
             and the wire types in `crates/http/src/dto.rs`; a test fails when the two differ, \
             and `DROVER_WRITE_REFERENCE=1 cargo test -p drover-http --test reference` writes \
             it again). [The HTTP API](http-api.md) explains serving, tokens and tenants, and \
             the rules every request follows.\n",
        );
        if let Some(description) = self.doc["info"]["description"].as_str() {
            let _ = write!(page, "\n{}\n", self.prose(description));
        }
        page.push_str(
            "\nAn operation that needs a token takes it as `Authorization: Bearer TOKEN`. Every \
             error answer has the body [ErrorBody](#errorbody). Types are JSON types. A request \
             may leave out a field that is not required; an answer has every field of its \
             schema, `null` when the field has no value, unless the field's meaning says when \
             it is absent.\n",
        );

        let groups = self.groups();
        let mut contents: Vec<String> = groups
            .iter()
            .map(|group| format!("[{}](#{})", group.title, anchor(&group.title)))
            .collect();
        contents.push("[Schemas](#schemas)".to_owned());
        let _ = write!(page, "\nContents: {}.\n", contents.join(", "));

        for group in &groups {
            let _ = write!(page, "\n## {}\n", group.title);
            if !group.description.is_empty() {
                let _ = write!(page, "\n{}\n", sentence(&self.prose(group.description)));
            }
            for operation in &group.operations {
                self.operation(&mut page, operation);
            }
        }

        page.push_str("\n## Schemas\n\nThe bodies of requests and answers, by name.\n");
        for (name, schema) in object(&self.doc["components"]["schemas"])
            .into_iter()
            .flatten()
        {
            self.schema(&mut page, name, schema);
        }
        page
    }

    /// The operations grouped by their first tag, in the order the document lists its tags.
    /// Operations without a listed tag come last, under "Other operations".
    fn groups(&self) -> Vec<Group<'a>> {
        let doc = self.doc;
        let mut operations = Vec::new();
        for (path, item) in object(&doc["paths"]).into_iter().flatten() {
            for method in METHODS {
                let spec = &item[method];
                if spec.is_object() {
                    operations.push(Operation {
                        method,
                        path: path.as_str(),
                        spec,
                    });
                }
            }
        }
        let mut groups = Vec::new();
        let mut listed = BTreeSet::new();
        for tag in doc["tags"].as_array().into_iter().flatten() {
            let Some(name) = tag["name"].as_str() else {
                continue;
            };
            listed.insert(name);
            let members: Vec<Operation<'a>> = operations
                .iter()
                .filter(|operation| operation.tag() == Some(name))
                .copied()
                .collect();
            if !members.is_empty() {
                groups.push(Group {
                    title: title_case(name),
                    description: text(&tag["description"]),
                    operations: members,
                });
            }
        }
        let others: Vec<Operation<'a>> = operations
            .into_iter()
            .filter(|operation| !operation.tag().is_some_and(|tag| listed.contains(tag)))
            .collect();
        if !others.is_empty() {
            groups.push(Group {
                title: "Other operations".to_owned(),
                description: "",
                operations: others,
            });
        }
        groups
    }

    /// An operation's section: heading, summary and description, token, parameters, request
    /// body and answers.
    fn operation(&self, page: &mut String, operation: &Operation<'_>) {
        let spec = operation.spec;
        let _ = write!(
            page,
            "\n### `{} {}`\n\n",
            operation.method.to_uppercase(),
            operation.path
        );
        for part in ["summary", "description"] {
            if let Some(text) = spec[part].as_str().filter(|s| !s.trim().is_empty()) {
                let _ = write!(page, "{}\n\n", self.prose(text));
            }
        }
        page.push_str(&self.authentication(spec));
        self.parameters(page, spec);
        self.request_body(page, &spec["requestBody"]);
        self.responses(page, spec);
    }

    fn parameters(&self, page: &mut String, spec: &Value) {
        let parameters: Vec<&Value> = spec["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .collect();
        if parameters.is_empty() {
            return;
        }
        page.push_str("\n**Parameters**\n\n");
        page.push_str("| name | in | type | required | meaning | bounds |\n");
        page.push_str("|---|---|---|---|---|---|\n");
        for parameter in parameters {
            let schema = &parameter["schema"];
            let _ = writeln!(
                page,
                "| {} | {} | {} | {} | {} | {} |",
                cell(&format!("`{}`", text(&parameter["name"]))),
                cell(text(&parameter["in"])),
                cell(&self.type_of(schema)),
                yes_no(parameter["required"].as_bool().unwrap_or(false)),
                cell(&self.inline(text(&parameter["description"]))),
                cell(&rules(schema)),
            );
        }
    }

    fn request_body(&self, page: &mut String, request: &Value) {
        if !request.is_object() {
            return;
        }
        let contents: Vec<String> = object(&request["content"])
            .into_iter()
            .flatten()
            .map(|(media_type, content)| {
                format!("{} (`{media_type}`)", self.type_of(&content["schema"]))
            })
            .collect();
        let required = if request["required"].as_bool().unwrap_or(false) {
            "required"
        } else {
            "optional"
        };
        let _ = write!(
            page,
            "\n**Request body:** {}, {required}.",
            contents.join(" or ")
        );
        if let Some(description) = request["description"].as_str() {
            let _ = write!(page, " {}", self.inline(description));
        }
        page.push('\n');
    }

    /// The answers in status order, each with its body's schema (and its media type when that
    /// is not JSON).
    fn responses(&self, page: &mut String, spec: &Value) {
        let mut responses: Vec<(&String, &Value)> =
            object(&spec["responses"]).into_iter().flatten().collect();
        if responses.is_empty() {
            return;
        }
        responses.sort_by_key(|(status, _)| (status.parse::<u16>().unwrap_or(u16::MAX), *status));
        page.push_str("\n**Responses**\n\n");
        page.push_str("| status | meaning | body |\n");
        page.push_str("|---|---|---|\n");
        for (status, response) in responses {
            let bodies: Vec<String> = object(&response["content"])
                .into_iter()
                .flatten()
                .map(|(media_type, content)| {
                    let schema = self.type_of(&content["schema"]);
                    if media_type == "application/json" {
                        schema
                    } else {
                        format!("{schema} (`{media_type}`)")
                    }
                })
                .collect();
            let _ = writeln!(
                page,
                "| {} | {} | {} |",
                cell(status),
                cell(&self.inline(text(&response["description"]))),
                cell(&bodies.join(" or ")),
            );
        }
    }

    /// What the operation's security requirements ask of a caller.
    fn authentication(&self, operation: &Value) -> String {
        let requirements: Vec<&Map<String, Value>> = operation["security"]
            .as_array()
            .or(self.doc["security"].as_array())
            .into_iter()
            .flatten()
            .filter_map(Value::as_object)
            .collect();
        if requirements.is_empty() || requirements.iter().any(|r| r.is_empty()) {
            return "**Token:** none needed.\n".to_owned();
        }
        let schemes: Vec<String> = requirements
            .iter()
            .map(|requirement| {
                requirement
                    .keys()
                    .map(|name| {
                        let scheme = &self.doc["components"]["securitySchemes"][name];
                        match (text(&scheme["type"]), text(&scheme["scheme"])) {
                            ("http", "bearer") => {
                                "required, as `Authorization: Bearer TOKEN`".to_owned()
                            }
                            _ => format!("the `{name}` security scheme"),
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" and ")
            })
            .collect();
        format!("**Token:** {}.\n", schemes.join(", or "))
    }

    fn schema(&self, page: &mut String, name: &str, schema: &Value) {
        let _ = write!(page, "\n### {name}\n\n");
        if let Some(description) = schema["description"].as_str() {
            let _ = write!(page, "{}\n\n", self.prose(description));
        }
        let Some(properties) = object(&schema["properties"]).filter(|p| !p.is_empty()) else {
            let rule = rules(schema);
            let _ = write!(page, "Type: {}", self.type_of(schema));
            if !rule.is_empty() {
                let _ = write!(page, "; {rule}");
            }
            page.push_str(".\n");
            return;
        };
        let required: BTreeSet<&str> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        page.push_str("| field | type | required | meaning | rule |\n");
        page.push_str("|---|---|---|---|---|\n");
        for (field, property) in properties {
            let _ = writeln!(
                page,
                "| {} | {} | {} | {} | {} |",
                cell(&format!("`{field}`")),
                cell(&self.type_of(property)),
                yes_no(required.contains(field.as_str())),
                cell(&self.inline(description(property))),
                cell(&rules(property)),
            );
        }
    }

    /// A schema's type in words: JSON types, component schemas as links to their sections.
    fn type_of(&self, schema: &Value) -> String {
        if let Some(reference) = schema["$ref"].as_str() {
            let name = reference.strip_prefix(SCHEMA_REF).unwrap_or(reference);
            return self.link(name);
        }
        for combinator in ["oneOf", "anyOf"] {
            if let Some(alternatives) = schema[combinator].as_array() {
                return either(alternatives.iter().map(|a| self.type_of(a)).collect());
            }
        }
        if let Some(all) = schema["allOf"].as_array() {
            let parts: Vec<String> = all.iter().map(|part| self.type_of(part)).collect();
            return parts.join(" and ");
        }
        let types: Vec<&str> = match &schema["type"] {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if types.is_empty() {
            return "any JSON".to_owned();
        }
        either(
            types
                .into_iter()
                .map(|t| self.json_type(t, schema))
                .collect(),
        )
    }

    fn json_type(&self, name: &str, schema: &Value) -> String {
        match name {
            "array" => format!("array of {}", self.type_of(&schema["items"])),
            "object" => match &schema["additionalProperties"] {
                Value::Object(values) if !values.is_empty() => {
                    let values = self.type_of(&schema["additionalProperties"]);
                    format!("object with {values} values")
                }
                _ => "object".to_owned(),
            },
            other => other.to_owned(),
        }
    }

    /// A link to a component schema's section, or its name when the document has none.
    fn link(&self, name: &str) -> String {
        if self.schemas.contains(name) {
            format!("[{name}](#{})", anchor(name))
        } else {
            format!("`{name}`")
        }
    }

    /// Description text as paragraphs of one line each, schema names linked.
    fn prose(&self, text: &str) -> String {
        text.split("\n\n")
            .map(|paragraph| self.inline(paragraph))
            .filter(|paragraph| !paragraph.is_empty())
            .collect::<Vec<_>>()
            .join("\n\n")
    }

    /// Description text as one line (for a table cell), with each rustdoc link to a component
    /// schema (`` [`Name`] ``) made a link to its section.
    fn inline(&self, text: &str) -> String {
        let mut line = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for name in &self.schemas {
            let rustdoc = format!("[`{name}`]");
            if line.contains(&rustdoc) {
                line = line.replace(&rustdoc, &format!("[`{name}`](#{})", anchor(name)));
            }
        }
        line
    }
}

/// The rules a schema states about its value: bounds, length, pattern, choices, format.
fn rules(schema: &Value) -> String {
    // An optional value is `oneOf` null and the value's own schema: the rules are that one's.
    if let Some(alternatives) = schema["oneOf"].as_array() {
        let rules: Vec<String> = alternatives
            .iter()
            .map(rules)
            .filter(|rule| !rule.is_empty())
            .collect();
        return rules.join("; ");
    }
    let mut rules = Vec::new();
    let number = |key: &str| schema[key].as_number().map(ToString::to_string);
    if let Some(format) = schema["format"].as_str() {
        rules.push(match format {
            "date-time" => "RFC 3339 date-time".to_owned(),
            other => format!("format `{other}`"),
        });
    }
    for (key, words) in [
        ("minimum", "minimum"),
        ("maximum", "maximum"),
        ("exclusiveMinimum", "greater than"),
        ("exclusiveMaximum", "less than"),
        ("minLength", "length at least"),
        ("maxLength", "length at most"),
        ("minItems", "items at least"),
        ("maxItems", "items at most"),
    ] {
        if let Some(value) = number(key) {
            rules.push(format!("{words} {value}"));
        }
    }
    if let Some(pattern) = schema["pattern"].as_str() {
        rules.push(format!("pattern `{pattern}`"));
    }
    if let Some(choices) = schema["enum"].as_array() {
        let choices: Vec<String> = choices.iter().map(|c| format!("`{c}`")).collect();
        rules.push(format!("one of {}", choices.join(", ")));
    }
    if let Some(default) = schema.get("default") {
        rules.push(format!("default `{default}`"));
    }
    rules.join("; ")
}

/// Alternatives joined with "or", `null` last ("string or null").
fn either(mut alternatives: Vec<String>) -> String {
    alternatives.dedup();
    let nullable = alternatives.iter().any(|a| a == "null");
    alternatives.retain(|a| a != "null");
    if nullable {
        alternatives.push("null".to_owned());
    }
    alternatives.join(" or ")
}

/// A schema's description; an optional value's (`oneOf` null and a schema) may sit on the
/// schema that is not null.
fn description(schema: &Value) -> &str {
    if let Some(own) = schema["description"].as_str() {
        return own;
    }
    schema["oneOf"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|alternative| alternative["description"].as_str())
        .unwrap_or_default()
}

/// Text ending as a sentence does.
fn sentence(text: &str) -> String {
    if text.ends_with(['.', '!', '?', ':']) {
        text.to_owned()
    } else {
        format!("{text}.")
    }
}

fn object(value: &Value) -> Option<&Map<String, Value>> {
    value.as_object()
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

fn yes_no(yes: bool) -> &'static str {
    if yes {
        "yes"
    } else {
        "no"
    }
}

/// A tag's section title: the tag with its first letter in upper case.
fn title_case(tag: &str) -> String {
    let mut chars = tag.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// The anchor of a heading, as GitHub and mdBook make it: lower case, spaces as `-`, other
/// punctuation but `-` and `_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// A table cell: the column separator escaped.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field of a made-up document: its `|` escaped in the table, an optional reference
    /// linked with `or null`, and the rules of a bounded integer.
    #[test]
    fn fields_render_as_table_rows() {
        let doc = serde_json::json!({
            "components": {"schemas": {
                "Inner": {"type": "object", "properties": {}},
                "Outer": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "inner": {"oneOf": [
                            {"type": "null"},
                            {"$ref": "#/components/schemas/Inner", "description": "The inner one."}
                        ]},
                        "size": {"type": "integer", "minimum": 1, "maximum": 9,
                                 "description": "a|b"}
                    }
                }
            }}
        });
        let page = Page::new(&doc).render();
        assert!(page.contains("| `inner` | [Inner](#inner) or null | no | The inner one. |  |\n"));
        assert!(page.contains("| `size` | integer | yes | a\\|b | minimum 1; maximum 9 |\n"));
        assert!(page.contains("\n### Inner\n\nType: object.\n"));
    }

    #[test]
    fn anchors_follow_github_and_mdbook() {
        assert_eq!(anchor("EnqueueRequest"), "enqueuerequest");
        assert_eq!(anchor("`POST /v1/jobs/{id}/cancel`"), "post-v1jobsidcancel");
        assert_eq!(anchor("Other operations"), "other-operations");
    }
}
