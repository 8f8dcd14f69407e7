//! Bearer-token authentication (docs/design.md section 7).
//!
//! Tokens map to a tenant and a role. They are given as `token:tenant:role` entries separated by
//! commas or newlines (`DROVER_API_TOKENS`, or a file passed to `drover serve --tokens`); `#`
//! starts a comment line in a file. The tenant `*` (operators only) means every tenant. Tokens are
//! kept only as SHA-256 digests, compared in constant time against every entry, and never
//! logged or echoed in errors.

use std::fmt;

use drover_core::{Actor, AuditSource, Error, TenantId};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// Shortest accepted token, in bytes.
pub const TOKEN_MIN_LEN: usize = 16;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Enqueue, list, get and cancel the tenant's jobs.
    Producer,
    /// Everything a producer may, plus retry, requeue and queue pause/resume.
    Operator,
}

impl Role {
    /// `producer` or `operator`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Producer => "producer",
            Role::Operator => "operator",
        }
    }
}

/// Which tenants' jobs a caller may see and change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantScope {
    /// One tenant.
    One(TenantId),
    /// Every tenant (operators with tenant `*`, and `--insecure-no-auth`).
    All,
}

impl TenantScope {
    /// True when a job of `tenant` is visible to this scope.
    pub fn allows(&self, tenant: &TenantId) -> bool {
        match self {
            TenantScope::One(own) => own == tenant,
            TenantScope::All => true,
        }
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Visible tenants.
    pub scope: TenantScope,
    /// Role.
    pub role: Role,
    /// Who, in audit records: `token:` and the first 8 hex digits of the token's SHA-256
    /// ([`fingerprint`]), never the token; [`Principal::INSECURE_NAME`] without authentication.
    pub name: String,
}

impl Principal {
    /// The caller of an API started with `--insecure-no-auth`: an operator of every tenant.
    pub fn insecure() -> Self {
        Principal {
            scope: TenantScope::All,
            role: Role::Operator,
            name: Principal::INSECURE_NAME.to_owned(),
        }
    }

    /// The name of every caller of an API started with `--insecure-no-auth`.
    pub const INSECURE_NAME: &'static str = "anonymous";

    /// This caller as the actor of operator writes from `source` (the API or the dashboard).
    pub fn actor(&self, source: AuditSource) -> Actor {
        let actor = Actor::new(self.name.clone(), source);
        match &self.scope {
            TenantScope::One(tenant) => actor.for_tenant(tenant.clone()),
            TenantScope::All => actor,
        }
    }

    /// Refuses a token scoped to one tenant: `what` (a clause such as "the queue list counts
    /// the jobs of every tenant") spans every tenant (docs/design.md section 7: a tenant never sees
    /// another tenant's jobs, nor counts of them).
    ///
    /// # Errors
    /// 403 `forbidden`: "{what}: it needs a token of tenant *".
    pub fn require_all_tenants(&self, what: &str) -> Result<(), ApiError> {
        if self.scope != TenantScope::All {
            return Err(ApiError::forbidden(format!(
                "{what}: it needs a token of tenant *"
            )));
        }
        Ok(())
    }
}

struct Entry {
    digest: [u8; 32],
    principal: Principal,
}

/// The configured tokens.
pub struct ApiTokens {
    entries: Vec<Entry>,
}

impl fmt::Debug for ApiTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiTokens({} entries)", self.entries.len())
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The short fingerprint of `token` ([`fingerprint`]).
pub fn token_fingerprint(token: &str) -> String {
    fingerprint(&digest(token))
}

/// A token's short fingerprint: `token:` and the first 8 hex digits of its SHA-256. It names a
/// token in audit records and lets an operator tell which entry of the token list acted
/// (`printf %s "$TOKEN" | sha256sum`), without revealing anything usable of the token.
pub fn fingerprint(digest: &[u8; 32]) -> String {
    let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("token:{hex}")
}

impl ApiTokens {
    /// Parses `token:tenant:role` entries separated by commas or newlines; blank entries and
    /// lines starting with `#` are ignored. The token is what comes before the first `:` (a
    /// token cannot contain `:`), the role what follows the last, the tenant everything
    /// between (a tenant may contain `:`).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] with field `tokens` naming the entry's position (never its
    /// text): not three parts, a token shorter than 16 bytes or with whitespace, a bad tenant, a
    /// role other than `producer`/`operator`, tenant `*` for a producer, or a repeated token.
    pub fn parse(spec: &str) -> Result<Self, Error> {
        let mut entries: Vec<Entry> = Vec::new();
        let items = spec
            .split(['\n', ','])
            .map(str::trim)
            .filter(|s| !s.is_empty() && !s.starts_with('#'));
        for (index, item) in items.enumerate() {
            let n = index + 1;
            let bad = |why: &str| Error::invalid("tokens", format!("entry {n}: {why}"));
            // The token ends at the first ':' and the role starts after the last, so a tenant
            // may contain ':' (`org:team`) and is never taken from a token's text.
            let Some((token, (tenant, role))) = item
                .split_once(':')
                .and_then(|(token, rest)| Some((token, rest.rsplit_once(':')?)))
            else {
                return Err(bad("must look like token:tenant:role"));
            };
            if token.len() < TOKEN_MIN_LEN {
                return Err(bad(&format!(
                    "token must be at least {TOKEN_MIN_LEN} characters"
                )));
            }
            if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(bad(
                    "token must not contain whitespace or control characters",
                ));
            }
            let role = match role {
                "producer" => Role::Producer,
                "operator" => Role::Operator,
                _ => return Err(bad("role must be producer or operator")),
            };
            let scope = if tenant == "*" {
                if role != Role::Operator {
                    return Err(bad("tenant * (every tenant) is only for the operator role"));
                }
                TenantScope::All
            } else {
                TenantScope::One(TenantId::parse(tenant).map_err(|e| bad(&format!("tenant: {e}")))?)
            };
            let digest = digest(token);
            if entries.iter().any(|e| bool::from(e.digest.ct_eq(&digest))) {
                return Err(bad("repeats a token given earlier"));
            }
            entries.push(Entry {
                digest,
                principal: Principal {
                    scope,
                    role,
                    name: fingerprint(&digest),
                },
            });
        }
        Ok(ApiTokens { entries })
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no token is configured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The principal of `token`, comparing its digest with every entry in constant time (no
    /// early exit, so timing does not reveal which entry or how much matched).
    pub fn authenticate(&self, token: &str) -> Option<Principal> {
        let presented = digest(token);
        let mut found: Option<&Principal> = None;
        for entry in &self.entries {
            if bool::from(entry.digest.ct_eq(&presented)) {
                found = Some(&entry.principal);
            }
        }
        found.cloned()
    }
}

/// How the API authenticates callers.
#[derive(Debug)]
pub enum AuthMode {
    /// Bearer tokens.
    Tokens(ApiTokens),
    /// Every caller is an operator of every tenant (`--insecure-no-auth`; development only).
    InsecureNoAuth,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_authenticates() {
        let tokens = ApiTokens::parse(
            "# comment\nproducer-token-aaaa:acme:producer, operator-token-bbbb:*:operator\n",
        )
        .unwrap();
        assert_eq!(tokens.len(), 2);
        let p = tokens.authenticate("producer-token-aaaa").unwrap();
        assert_eq!(p.role, Role::Producer);
        assert_eq!(p.scope, TenantScope::One(TenantId::parse("acme").unwrap()));
        assert_eq!(
            tokens.authenticate("operator-token-bbbb").unwrap().scope,
            TenantScope::All
        );
        assert!(tokens.authenticate("producer-token-aaab").is_none());
        assert!(tokens.authenticate("").is_none());
    }

    #[test]
    fn errors_never_echo_the_token() {
        for spec in [
            "short:acme:producer",
            "secret-token-xxxxxxxx:acme:admin",
            "secret-token-xxxxxxxx:*:producer",
            "secret-token-xxxxxxxx:bad tenant:producer",
            "secret-token-xxxxxxxx",
            "secret-token-xxxxxxxx:a:producer,secret-token-xxxxxxxx:b:producer",
        ] {
            let err = ApiTokens::parse(spec).unwrap_err().to_string();
            assert!(!err.contains("secret-token"), "{err}");
            assert!(!err.contains("short:"), "{err}");
            assert!(err.contains("entry"), "{err}");
        }
    }

    /// Tenant names may hold `:` (`org:team`), so the token ends at the first `:` and the
    /// role starts after the last: an entry is never read with part of the token as its
    /// tenant, or part of the tenant as its token.
    #[test]
    fn tenants_may_contain_colons_and_the_token_ends_at_the_first() {
        let tokens = ApiTokens::parse(
            "abcdefghijklmnopqrstu:t1:t2:operator\nsupersecrettoken1:acme:eu:producer",
        )
        .unwrap();
        let p = tokens.authenticate("abcdefghijklmnopqrstu").unwrap();
        assert_eq!(p.scope, TenantScope::One(TenantId::parse("t1:t2").unwrap()));
        let p = tokens.authenticate("supersecrettoken1").unwrap();
        assert_eq!(
            p.scope,
            TenantScope::One(TenantId::parse("acme:eu").unwrap())
        );
        assert!(tokens.authenticate("abcdefghijklmnopqrstu:t1").is_none());
        assert!(tokens.authenticate("supersecrettoken1:acme").is_none());
        // Tokens cannot contain ':'. One written with it is read as a shorter token and a
        // tenant that starts with the rest of it (here refused: the token is too short); it is
        // never cut down to the entry's last tenant part, which could be a real tenant.
        assert!(ApiTokens::parse("short:abcdefghijklmnopq:acme:producer").is_err());
    }
}
