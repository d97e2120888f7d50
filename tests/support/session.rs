//! An `ephemeral-key` function over its own tables, with OpenAI (and optionally SSM) stood in.

use ephemeral_key::App;
use lambda_http::{Body, Request, Response};
use tollgate::clock::ManualClock;
use tollgate::config::Env;
use tollgate_functions::catalog;
use tollgate_functions::serve::GuardedFunction;

use crate::counting::RequestCounter;
use crate::dynamo::{self, Tables};
use crate::events::HttpEvent;
use crate::manual_clock;
use crate::openai::{Answer, OpenAiStandIn};
use crate::ssm::SsmStandIn;

/// The internal token tests use.
pub const INTERNAL_TOKEN: &str = "internal-token-for-session-tests-42";
/// Secrets the stand-in mints expire here (well after the tests' clock).
pub const SECRET_EXPIRES_AT: u64 = crate::T0_MS / 1000 + 600;

pub struct SessionHarness {
    pub app: App,
    pub ddb: aws_sdk_dynamodb::Client,
    pub counter: RequestCounter,
    pub tables: Tables,
    pub clock: ManualClock,
    pub openai: OpenAiStandIn,
}

impl SessionHarness {
    /// `ip=10/1h,global=2000/1d`, the API key as a plain variable, OpenAI minting secrets.
    pub async fn new(extra: &[(&str, &str)]) -> Self {
        Self::build(extra, None).await
    }

    /// With the API key (parameter `/tollgate/openai-api-key`) in an SSM stand-in.
    pub async fn with_ssm(extra: &[(&str, &str)], ssm: &SsmStandIn) -> Self {
        Self::build(extra, Some(ssm)).await
    }

    async fn build(extra: &[(&str, &str)], ssm: Option<&SsmStandIn>) -> Self {
        let (ddb, counter) = dynamo::client();
        Self::build_with(ddb, counter, extra, ssm).await
    }

    /// The function's DynamoDB client is `ddb` (e.g. through a fault proxy); the tables are made,
    /// and read back by the tests, with a direct client.
    pub async fn build_with(
        ddb: aws_sdk_dynamodb::Client,
        counter: RequestCounter,
        extra: &[(&str, &str)],
        ssm: Option<&SsmStandIn>,
    ) -> Self {
        let (direct, _) = dynamo::client();
        let tables = Tables::create(&direct).await;
        let (clock, shared) = manual_clock();
        let openai = OpenAiStandIn::start(Answer::Secret {
            expires_at: SECRET_EXPIRES_AT,
        })
        .await;
        let mut env = Env::from_pairs(tables.env_pairs());
        env.set(
            catalog::EPHEMERAL_KEY.limits_variable,
            "ip=10/1h,global=2000/1d",
        )
        .set("OPENAI_BASE_URL", openai.server.uri())
        .set("INTERNAL_TOKEN", INTERNAL_TOKEN)
        .set("UPSTREAM_TIMEOUT_SECONDS", "2");
        match ssm {
            Some(_) => env.set("OPENAI_API_KEY_PARAM", "/tollgate/openai-api-key"),
            None => env.set("OPENAI_API_KEY", "sk-test-key"),
        };
        for (k, v) in extra {
            env.set(*k, *v);
        }
        let app = App::from_env(&env, ddb, ssm.map(SsmStandIn::client), shared)
            .expect("valid test settings");
        Self {
            app,
            ddb: direct,
            counter,
            tables,
            clock,
            openai,
        }
    }

    /// `POST /session` from an address, with an optional JSON body.
    pub fn post(ip: &str, body: Option<&str>) -> HttpEvent {
        let event = HttpEvent::post("/session").from_ip(ip);
        match body {
            Some(b) => event.header("content-type", "application/json").body(b),
            None => event,
        }
    }

    pub async fn send(&self, req: Request) -> Response<Body> {
        self.app.handle(req).await
    }

    /// How many idempotency records the table holds.
    pub async fn records(&self) -> usize {
        dynamo::scan_all(&self.ddb, &self.tables.idempotency)
            .await
            .len()
    }

    /// The stored counters whose key contains `needle`, summed.
    pub async fn counter_sum(&self, needle: &str) -> u64 {
        dynamo::counters_matching(&self.ddb, &self.tables.rate_limits, needle)
            .await
            .iter()
            .map(|(_, c)| c)
            .sum()
    }
}
