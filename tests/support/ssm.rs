//! A stand-in for SSM Parameter Store at the HTTP level: the real SDK client talks to it, so its
//! serialisation, error parsing and retries all run.

use std::sync::{Arc, Mutex};

use aws_sdk_ssm::config::{BehaviorVersion, Credentials, Region};
use serde_json::json;
use wiremock::matchers::{header, method};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// What the stand-in answers to `GetParameter`.
#[derive(Debug, Clone)]
pub enum Reply {
    Value(String),
    /// An SSM error code with its HTTP status, e.g. (400, "ParameterNotFound").
    Error(u16, String),
}

/// A running stand-in whose answer can change between requests.
pub struct SsmStandIn {
    pub server: MockServer,
    reply: Arc<Mutex<Reply>>,
}

struct Responder(Arc<Mutex<Reply>>);

impl Respond for Responder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let asked: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let name = asked["Name"].as_str().unwrap_or_default().to_string();
        match self.0.lock().unwrap().clone() {
            Reply::Value(value) => ResponseTemplate::new(200)
                .insert_header("content-type", "application/x-amz-json-1.1")
                .set_body_string(
                    json!({"Parameter": {"Name": name, "Type": "SecureString", "Value": value, "Version": 1}})
                        .to_string(),
                ),
            Reply::Error(status, code) => ResponseTemplate::new(status)
                .insert_header("content-type", "application/x-amz-json-1.1")
                .insert_header("x-amzn-errortype", code.as_str())
                .set_body_string(
                    json!({"__type": code, "message": format!("{code} for {name} at ssm.internal.example")})
                        .to_string(),
                ),
        }
    }
}

impl SsmStandIn {
    pub async fn start(reply: Reply) -> Self {
        let server = MockServer::start().await;
        let reply = Arc::new(Mutex::new(reply));
        Mock::given(method("POST"))
            .and(header("x-amz-target", "AmazonSSM.GetParameter"))
            .respond_with(Responder(reply.clone()))
            .mount(&server)
            .await;
        Self { server, reply }
    }

    /// Changes what later requests get.
    pub fn set(&self, reply: Reply) {
        *self.reply.lock().unwrap() = reply;
    }

    /// `GetParameter` requests received so far.
    pub async fn calls(&self) -> usize {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .len()
    }

    /// An SSM client configured as in production (`tollgate::aws::ssm`), pointed here.
    pub fn client(&self) -> aws_sdk_ssm::Client {
        let sdk = aws_config::SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(aws_sdk_ssm::config::SharedCredentialsProvider::new(
                Credentials::new("test", "test", None, None, "tests"),
            ))
            .build();
        let env = tollgate::config::Env::from_pairs([("SSM_ENDPOINT", self.server.uri())]);
        tollgate::aws::ssm(&sdk, &env)
    }
}
