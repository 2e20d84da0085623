//! An outbox tool bound to a fake ERP in process, for the outbox's tests: `erp_order`, its
//! request function and the ERP endpoint, orders o1..o40 of shopping-a, and a dispatcher login.

use super::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;
use tokio_postgres::Client;
use toolgate_cli::dispatch::{self, Options, Report};
use toolgate_cli::fixture::{Lab, APP};
use toolgate_fake_erp::{Config, FakeErp, Settings};

pub const TOOL: &str = "erp_order";
pub const DISPATCHER: &str = "toolgate_it_dispatcher";

/// A lab with an outbox tool `erp_order` bound to a fake ERP (refresh tokens, async protocol),
/// orders o1..o40 of shopping-a, and a dispatcher login.
pub struct Setup {
    pub lab: Lab,
    pub erp: FakeErp,
    pub root: Client,
    pub app: Client,
    pub token_file: PathBuf,
    /// Origins the test moved the endpoint to (`move_endpoint`): its dispatchers may reach them.
    pub moved_to: std::sync::Mutex<Vec<String>>,
}

pub async fn setup(name: &str) -> Setup {
    let lab = lab(name).await;
    let settings = Settings {
        per_second: 0,
        per_minute: 0,
        async_delay: Duration::from_millis(50),
        require_idempotency_key: true,
        ..Settings::default()
    };
    let erp = toolgate_fake_erp::start("127.0.0.1:0".parse().unwrap(), Config { settings, refresh_token: None })
        .await
        .unwrap();
    let token_file = lab.keys_dir.join("erp-refresh-token");
    std::fs::create_dir_all(&lab.keys_dir).unwrap();
    std::fs::write(&token_file, erp.refresh_token()).unwrap();
    let root = lab.connect("postgres").await.unwrap();
    root.batch_execute(&format!(
        "DO $$ BEGIN CREATE ROLE {DISPATCHER} LOGIN IN ROLE toolgate_dispatcher; \
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$;
         DO $$ BEGIN CREATE ROLE it_remote_owner NOLOGIN; \
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$;
         CREATE SCHEMA remote AUTHORIZATION it_remote_owner;
         SET ROLE it_remote_owner;
         CREATE TABLE remote.orders (tenant_id text, id text, PRIMARY KEY (tenant_id, id));
         INSERT INTO remote.orders SELECT 'shopping-a', 'o' || i FROM generate_series(1, 40) i;
         CREATE FUNCTION remote.target(ctx jsonb, args jsonb) RETURNS jsonb
         LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, remote, pg_temp AS $f$
             SELECT jsonb_build_object('id', o.id, 'tenant', o.tenant_id) FROM remote.orders o
              WHERE o.tenant_id = ctx->>'tenant' AND o.id = args->>'order_id' FOR UPDATE
         $f$;
         CREATE FUNCTION remote.request(ctx jsonb, args jsonb) RETURNS jsonb
         LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, remote, pg_temp AS $f$
             SELECT jsonb_build_object('method', 'POST', 'path', '/purchases',
                                       'body', jsonb_build_object('tenant', ctx->>'tenant',
                                                                  'order_id', ctx->'target'->>'id',
                                                                  'part', args->>'part',
                                                                  'quantity', (args->>'quantity')::int,
                                                                  'value', '12.50'))
         $f$;
         REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA remote FROM PUBLIC;
         RESET ROLE;
         SET ROLE toolgate_admin;
         SELECT toolgate.add_erp_endpoint('fake_erp', '{base}', 'refresh_token');
         RESET ROLE;
         SET client_min_messages = warning;
         SELECT toolgate.define_outbox_tool('{TOOL}', 'Order a part from the ERP.',
             '{{\"type\": \"object\", \"additionalProperties\": false,
               \"required\": [\"order_id\", \"part\", \"quantity\", \"idempotency_key\"],
               \"properties\": {{\"order_id\": {{\"type\": \"string\"}}, \"part\": {{\"type\": \"string\"}},
                                \"quantity\": {{\"type\": \"integer\", \"minimum\": 1}},
                                \"idempotency_key\": {{\"type\": \"string\", \"minLength\": 8}}}}}}',
             false, 'remote.target(jsonb, jsonb)', 'remote.request(jsonb, jsonb)', 'fake_erp');
         SELECT toolgate.set_policy('shopping-a', '{TOOL}', allowed => true, roles => ARRAY['supervisor'], tier => 0);",
        base = erp.base_url()
    ))
    .await
    .unwrap();
    let app = lab.connect(APP).await.unwrap();
    Setup { lab, erp, root, app, token_file, moved_to: std::sync::Mutex::new(Vec::new()) }
}

impl Setup {
    /// Move the endpoint to `url`, as the DBA's chosen role would (`repoint_erp_endpoint`, here
    /// the owner's), and let this test's dispatchers reach its origin.
    pub async fn move_endpoint(&self, url: &str) {
        self.root.execute("SELECT toolgate.repoint_erp_endpoint('fake_erp', $1)", &[&url]).await.unwrap();
        self.moved_to.lock().unwrap().push(dispatch::origin(url).expect("an http(s) URL"));
    }

    /// The origins this test's dispatchers may reach: the fake ERP's, and where the test moved
    /// the endpoint.
    pub fn origins(&self) -> Vec<String> {
        let mut origins = vec![dispatch::origin(&self.erp.base_url()).expect("the fake ERP's origin")];
        origins.extend(self.moved_to.lock().unwrap().iter().cloned());
        origins
    }

    pub fn options(&self) -> Options {
        Options {
            database: format!(
                "host={} port={} user={DISPATCHER} dbname={}",
                self.lab.server.host, self.lab.server.port, self.lab.dbname
            ),
            once: true,
            refresh_token_files: [("fake_erp".to_string(), self.token_file.clone())].into(),
            allowed_origins: self.origins(),
            allow_private_addresses: true,
            timeout: Duration::from_secs(2),
            settle_within: Duration::from_secs(5),
            ..Options::default()
        }
    }

    pub async fn dispatch(&self) -> Report {
        dispatch::run(&self.options()).await.expect("the dispatcher runs")
    }

    /// `toolgate.call` of the outbox tool for order `order` with `key`.
    pub async fn call(&self, order: &str, key: &str) -> Value {
        let args = json!({"order_id": order, "part": "filter", "quantity": 2, "idempotency_key": key});
        toolgate_cli::db::json(
            &self.app,
            "SELECT toolgate.call($1, 'conv-erp', $2, $3)",
            &[&self.lab.supervisor_a(), &TOOL, &args],
        )
        .await
        .unwrap()
    }

    /// The ERP's record for the gate's key `key`: (status, effects); ("-", 0) if it has none.
    pub fn erp_key(&self, key: &str) -> (String, i64) {
        let by_key = &self.erp.effects()["by_key"][format!("shopping-a:{TOOL}:{key}")];
        (by_key["status"].as_str().unwrap_or("-").to_string(), by_key["effects"].as_i64().unwrap_or(0))
    }

    pub fn erp(&self, what: &str) -> i64 {
        self.erp.effects()[what].as_i64().unwrap()
    }

    pub async fn outbox(&self, key: &str) -> (String, i32) {
        let row = self
            .root
            .query_one("SELECT state, attempts FROM toolgate.outbox WHERE idempotency_key = $1", &[&key])
            .await
            .unwrap();
        (row.get(0), row.get(1))
    }

    /// The ERP's (or the dispatcher's) last error word for the intent of `key`.
    pub async fn last_error(&self, key: &str) -> Option<String> {
        self.root
            .query_one("SELECT last_error FROM toolgate.outbox WHERE idempotency_key = $1", &[&key])
            .await
            .unwrap()
            .get(0)
    }

    pub async fn dispatch_audit(&self, key_outcome: &str) -> i64 {
        self.root
            .query_one(
                "SELECT count(*) FROM toolgate.audit WHERE kind = 'dispatch' AND tool = $1 AND outcome = $2",
                &[&TOOL, &key_outcome],
            )
            .await
            .unwrap()
            .get(0)
    }
}

/// The text of member `name` of an object the gate marked untrusted all through (its entries,
/// `[{"key": {"untrusted": true, "text": …}, "value": …}]`), if that value is a marked string.
pub fn marked_field<'a>(marked: &'a Value, name: &str) -> Option<&'a str> {
    marked.as_array()?.iter().find(|e| e["key"]["text"] == name && e["key"]["untrusted"] == true).and_then(|e| {
        let v = &e["value"];
        (v["untrusted"] == true).then(|| v["text"].as_str()).flatten()
    })
}

/// A child process killed (SIGKILL) when this is dropped, the test failing or not.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Setup {
    /// `toolgate dispatch` as a process of its own, polling (batch 8, 4 in flight, leases of 2 s,
    /// exchanges of 1 s at most),
    /// with `more` options.
    pub fn spawn_dispatcher(&self, more: &[&str]) -> Killed {
        let child = std::process::Command::new(toolgate())
            .args(["dispatch", "--batch", "8", "--concurrency", "4", "--poll", "0.2", "--lease", "2", "--timeout", "1"])
            .arg("--database")
            .arg(self.options().database)
            .arg("--refresh-token-file")
            .arg(format!("fake_erp={}", self.token_file.display()))
            .args(self.origins().iter().flat_map(|o| ["--allow-origin".to_string(), o.clone()]))
            .arg("--allow-private-addresses")
            .args(more)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("toolgate dispatch starts");
        Killed(child)
    }
}

/// Wait until every intent of the outbox is final (SUCCEEDED, REJECTED or DEAD), as `client`
/// sees it, polling every 100 ms at most `tries` times; the number still open then.
pub async fn wait_final(client: &Client, tries: usize) -> i64 {
    let mut open = i64::MAX;
    for _ in 0..tries {
        open =
            count(client, "SELECT count(*) FROM toolgate.outbox WHERE state NOT IN ('SUCCEEDED', 'REJECTED', 'DEAD')")
                .await;
        if open == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    open
}
