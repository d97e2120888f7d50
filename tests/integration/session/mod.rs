//! The session endpoint against DynamoDB Local, with OpenAI and SSM stood in over HTTP.

mod idempotency;
mod limits;
mod refused;
mod upstream;
