//! The transfer function against DynamoDB Local: retries never move money twice.

mod concurrency;
mod failures;
mod lost_response;
mod reads;
mod refusals;
mod replay;
mod request_counts;
mod two_phase;
mod validation;
