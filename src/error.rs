//! Errors for calls that cannot be judged at all: a DBA's bad input, a caller without the right
//! role, a transaction the gate cannot write in. Each maps to a standard SQLSTATE; messages never
//! carry a token or a secret, and no error the gate raises carries a detail or a backtrace.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::PgSqlErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("invalid public key: {0}")]
    PublicKey(String),
    #[error("invalid tool schema: {0}")]
    Schema(String),
    #[error("invalid consent template: {0}")]
    Template(String),
    #[error("a tool name is 1 to 63 lower-case letters, digits and _, starting with a letter")]
    ToolName,
    #[error("invalid JWKS document: {0}")]
    Jwks(String),
    #[error("invalid locale: {0}")]
    Locale(String),
    #[error("invalid path segment: {0}")]
    PathSegment(&'static str),
}

impl AdminError {
    fn sqlstate(&self) -> PgSqlErrorCode {
        match self {
            AdminError::PublicKey(_)
            | AdminError::Schema(_)
            | AdminError::Template(_)
            | AdminError::Jwks(_)
            | AdminError::Locale(_)
            | AdminError::PathSegment(_)
            | AdminError::ToolName => PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        }
    }

    /// Raise this error as a Postgres ERROR with its SQLSTATE.
    pub fn raise(self) -> ! {
        ErrorReport::new(self.sqlstate(), self.to_string(), "pg_toolgate").report(pgrx::PgLogLevel::ERROR);
        unreachable!("ERROR does not return")
    }
}

/// Why an agent entry point raises instead of returning an outcome. Fixed messages: the same
/// for every caller and every token, so an error says nothing about what was sent.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("pg_toolgate: the gate needs a read-write transaction")]
    ReadOnly,
    #[error("pg_toolgate: internal error (the server log has the details)")]
    Internal,
    #[error("pg_toolgate: the idempotency key was settled by a concurrent call; a retry replays its reply")]
    ConcurrentKey,
}

impl GateError {
    fn sqlstate(&self) -> PgSqlErrorCode {
        match self {
            GateError::ReadOnly => PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
            GateError::Internal => PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            GateError::ConcurrentKey => PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
        }
    }

    /// Raise this error as a Postgres ERROR with its SQLSTATE.
    pub fn raise(self) -> ! {
        ErrorReport::new(self.sqlstate(), self.to_string(), "pg_toolgate").report(pgrx::PgLogLevel::ERROR);
        unreachable!("ERROR does not return")
    }
}
