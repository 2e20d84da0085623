//! Seed 000's lab end to end, through the SQL API over real connections: the demo's every
//! invariant must hold.

mod common;

use toolgate_cli::demo::{run, Options};

#[tokio::test]
async fn seed_000_lab_holds_every_invariant() {
    let log = std::env::var("TOOLGATE_TEST_LOG").ok().map(Into::into);
    let opts =
        Options { server: common::server(), dbname: "it_lab".into(), keys_dir: common::keys_dir(), server_log: log };
    let checks = run(&opts).await.expect("the lab runs");
    assert!(checks.broken.is_empty(), "broken invariants: {:?}", checks.broken);
    assert!(checks.held >= 16);
}
