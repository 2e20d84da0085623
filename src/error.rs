//! Errors for calls that cannot be judged at all: a DBA's bad input, a caller without the right
//! role. Each maps to a standard SQLSTATE; messages never carry a token or a secret.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::PgSqlErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("invalid public key: {0}")]
    PublicKey(String),
    #[error("invalid tool schema: {0}")]
    Schema(String),
}

impl AdminError {
    fn sqlstate(&self) -> PgSqlErrorCode {
        match self {
            AdminError::PublicKey(_) | AdminError::Schema(_) => PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        }
    }

    /// Raise this error as a Postgres ERROR with its SQLSTATE.
    pub fn raise(self) -> ! {
        ErrorReport::new(self.sqlstate(), self.to_string(), "pg_toolgate").report(pgrx::PgLogLevel::ERROR);
        unreachable!("ERROR does not return")
    }
}
