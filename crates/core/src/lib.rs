//! The pure decisions of pg_toolgate.
//!
//! Everything here is plain Rust with no Postgres in sight, so each rule can be unit-tested,
//! fuzzed and mutated in milliseconds. The extension calls these functions from its gate steps;
//! the `toolgate` command uses the same types to mint tokens.

pub mod consent;
pub mod contract;
pub mod digest;
pub mod issuer;
pub mod jsonb;
pub mod locale;
pub mod outcome;
pub mod personal;
pub mod policy;
pub mod proposal;
pub mod request;
pub mod seal;
pub mod token;
pub mod untrusted;
