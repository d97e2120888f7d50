//! A transfer function over its own tables, with a client and accounts ready to use.

use lambda_http::{Body, Request, Response};
use secrecy::ExposeSecret;
use tollgate::clock::ManualClock;
use tollgate::config::Env;
use tollgate_functions::catalog;
use tollgate_functions::serve::GuardedFunction;
use transfer::App;

use crate::counting::RequestCounter;
use crate::dynamo::{self, Tables};
use crate::events::HttpEvent;
use crate::manual_clock;

/// One client's credentials.
#[derive(Debug, Clone)]
pub struct TestClient {
    pub id: String,
    pub token: String,
}

pub struct TransferHarness {
    pub app: App,
    pub ddb: aws_sdk_dynamodb::Client,
    pub counter: RequestCounter,
    pub tables: Tables,
    pub clock: ManualClock,
}

impl TransferHarness {
    /// Generous limits so that tests of transfers are not tests of limits.
    pub async fn new() -> Self {
        Self::with_env(&[]).await
    }

    pub async fn with_env(extra: &[(&str, &str)]) -> Self {
        let (ddb, counter) = dynamo::client();
        Self::build(ddb, counter, extra).await
    }

    /// The function's DynamoDB client is `ddb` (e.g. through a fault proxy).
    pub async fn build(
        ddb: aws_sdk_dynamodb::Client,
        counter: RequestCounter,
        extra: &[(&str, &str)],
    ) -> Self {
        let (clock, shared) = manual_clock();
        Self::build_with_clock(ddb, counter, extra, clock, shared).await
    }

    /// As [`Self::build`], with the function reading time from `shared` (which `clock` moves).
    pub async fn build_with_clock(
        ddb: aws_sdk_dynamodb::Client,
        counter: RequestCounter,
        extra: &[(&str, &str)],
        clock: ManualClock,
        shared: tollgate::clock::SharedClock,
    ) -> Self {
        let (direct, _) = dynamo::client();
        let tables = Tables::create(&direct).await;
        let mut env = Env::from_pairs(tables.env_pairs());
        env.set(
            catalog::TRANSFER.limits_variable,
            "ip=100000/1m,client=100000/1m",
        );
        for (k, v) in extra {
            env.set(*k, *v);
        }
        let app = App::from_env(&env, ddb, None, shared).expect("valid test settings");
        Self {
            app,
            ddb: direct,
            counter,
            tables,
            clock,
        }
    }

    pub async fn client(&self, name: &str) -> TestClient {
        let c = self.app.clients.create(name).await.unwrap();
        TestClient {
            id: c.client_id,
            token: c.token.expose_secret().to_string(),
        }
    }

    pub async fn account(&self, owner: &TestClient, balance: u64, currency: &str) -> String {
        self.app
            .ledger
            .create_account(&owner.id, balance, currency)
            .await
            .unwrap()
            .account_id
    }

    pub async fn balance(&self, account: &str) -> u64 {
        self.app
            .ledger
            .account(account)
            .await
            .unwrap()
            .unwrap()
            .balance
    }

    /// `POST /transfers` with a token, key and raw body.
    pub fn post(&self, client: &TestClient, key: &str, body: &str) -> Request {
        HttpEvent::post("/transfers")
            .header("authorization", &format!("Bearer {}", client.token))
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(body)
            .request()
    }

    /// A transfer body.
    pub fn body(from: &str, to: &str, amount: u64) -> String {
        serde_json::json!({"from": from, "to": to, "amount": amount}).to_string()
    }

    pub async fn send(&self, req: Request) -> Response<Body> {
        self.app.handle(req).await
    }

    pub async fn get(&self, client: &TestClient, path: &str) -> Response<Body> {
        self.app
            .handle(
                HttpEvent::get(path)
                    .header("authorization", &format!("Bearer {}", client.token))
                    .request(),
            )
            .await
    }

    /// Number of items in a table.
    pub async fn count(&self, table: &str) -> usize {
        dynamo::scan_all(&self.ddb, table).await.len()
    }
}
