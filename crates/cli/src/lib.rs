//! The `toolgate` command's library: key files, tokens, database helpers, the fixture loader and
//! the demo. The integration tests use the same pieces.

pub mod agent_bench;
pub mod audit;
pub mod bench;
pub mod confirm;
pub mod console;
pub mod db;
pub mod demo;
pub mod dispatch;
pub mod fixture;
pub mod keys;
pub mod load;
pub mod login;
pub mod observe;

/// Errors of the command and its tests.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T> = std::result::Result<T, Error>;
