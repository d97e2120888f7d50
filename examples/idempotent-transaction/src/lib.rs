//! An idempotent POST whose effect is one DynamoDB transaction: booking a seat.
//!
//! `POST /bookings` with `Idempotency-Key: <16+ characters>` and `{"seat": "12A", "guest":
//! "Ada"}` books the seat, once: the seat's item (conditioned on the seat being free), the
//! idempotency record and the stored `201` commit together in one `TransactWriteItems`
//! ([`IdempotencyStore::commit`]). So:
//!
//! - the same request again (a retry after a lost response) gets the same `201`, marked
//!   `Idempotent-Replayed: true`, and books nothing;
//! - the same key with another body is `422 idempotency_key_reused`;
//! - another key for a taken seat is `409 seat_taken`, stored under that key too, so its
//!   retry gets the same `409` even if the seat is freed meanwhile;
//! - there is no moment in which the seat is booked and the key says nothing, or the reverse.
//!
//! Keys are scoped to the client address (no authentication here), so they must be long
//! enough that nobody guesses another's (`unguessable`: 16 characters, a UUID is 36).
//!
//! In front: request ids, routes, the kill switch, the client address, the `ip` limit.

use std::sync::Arc;

use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};
use http::StatusCode;
use lambda_http::{Body, Request, Response};
use serde::Deserialize;
use tollgate::clock::SharedClock;
use tollgate::config::{ConfigError, Env, GuardSettings};
use tollgate::gate::Gate;
use tollgate::http::json_response;
use tollgate::idempotency::{
    fingerprint, Explained, IdempotencyKey, IdempotencyStore, KeyError, Scope, TransactionEffect,
};
use tollgate::layers::{handler_fn, Caller, ClientAddress, Methods, RequestId, ResponseFuture};
use tollgate::problem::Answer;
use tollgate::ratelimit::Layer;
use tollgate::{ApiError, ClientError};
use tower::{Service, ServiceBuilder};

/// The function's name: its kill switch's key and its counters' scope.
pub const FUNCTION: &str = "bookings";
/// The variable holding the limits.
pub const LIMITS_VAR: &str = "RATE_LIMITS";
/// 30 requests a minute per address when `RATE_LIMITS` is unset.
pub const DEFAULT_LIMITS: &str = "ip=30/1m";
/// The route the idempotency records are scoped to.
const ROUTE: &str = "POST /bookings";

/// What only this example answers, beside the library's [`ApiError`]s; rendered as
/// problem+json by [`ClientError`], like every library error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BookingError {
    #[error(transparent)]
    Api(#[from] ApiError),
    /// Another booking holds the seat.
    #[error("seat taken")]
    SeatTaken,
}

impl ClientError for BookingError {
    fn as_api_error(&self) -> Option<&ApiError> {
        match self {
            BookingError::Api(e) => Some(e),
            BookingError::SeatTaken => None,
        }
    }

    fn answer(&self) -> Answer {
        match self {
            BookingError::Api(e) => e.answer(),
            BookingError::SeatTaken => Answer::new(
                StatusCode::CONFLICT,
                "seat_taken",
                "Seat taken",
                "Another booking holds this seat.",
            ),
        }
    }
}

// `?` on the library's errors gives their problem (400 for a bad key, 503 ...).
tollgate::lift_api_errors!(BookingError:
    KeyError,
    tollgate::idempotency::TransactionError,
);

/// A booking as the client sends it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Booking {
    seat: String,
    guest: String,
}

impl Booking {
    fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let bad = |detail: &str| ApiError::BadRequest {
            detail: detail.to_string(),
        };
        let booking: Booking = serde_json::from_slice(body)
            .map_err(|_| bad("The body must be {\"seat\": string, \"guest\": string}."))?;
        let seat_ok = (1..=8).contains(&booking.seat.len())
            && booking.seat.bytes().all(|b| b.is_ascii_alphanumeric());
        if !seat_ok {
            return Err(bad("seat: 1 to 8 letters or digits."));
        }
        if booking.guest.trim().is_empty() || booking.guest.chars().count() > 100 {
            return Err(bad("guest: 1 to 100 characters."));
        }
        Ok(booking)
    }
}

/// Everything a request needs, built once per process.
#[derive(Debug, Clone)]
struct Bookings {
    table: Arc<str>,
    idempotency: IdempotencyStore,
}

/// The guards and the handler, built from `env` (`RATE_LIMIT_TABLE`, `CONTROL_TABLE`,
/// `BOOKINGS_TABLE`, `IDEMPOTENCY_TABLE`, `IDEMPOTENCY_TTL_SECONDS`, `RATE_LIMITS`).
pub fn service(
    env: &Env,
    ddb: aws_sdk_dynamodb::Client,
    clock: SharedClock,
) -> Result<
    impl Service<
            Request,
            Response = Response<Body>,
            Error = lambda_http::Error,
            Future = ResponseFuture,
        > + Clone
        + Send
        + 'static,
    ConfigError,
> {
    let settings = GuardSettings::from_env(env, FUNCTION, LIMITS_VAR, DEFAULT_LIMITS)?;
    let ttl = env.seconds_or("IDEMPOTENCY_TTL_SECONDS", 86_400, 60)?;
    let bookings = Bookings {
        table: env.required("BOOKINGS_TABLE")?.into(),
        // Completed answers are kept in process too: a retry this process has seen costs no
        // DynamoDB request.
        idempotency: IdempotencyStore::new(
            ddb.clone(),
            env.required("IDEMPOTENCY_TABLE")?,
            clock.clone(),
            ttl,
        )
        .with_replay_cache(1_000),
    };
    let gate = Gate::new(settings, ddb, clock);
    Ok(ServiceBuilder::new()
        .layer(gate.respond_layer())
        .layer(gate.routes_layer(Methods(|path: &str| {
            (path == "/bookings").then_some("POST")
        })))
        .layer(gate.kill_switch_layer())
        .layer(gate.client_address_layer())
        .layer(
            gate.rate_limit_layer()
                .limit(gate.rate_limit(Layer::Ip), ClientAddress),
        )
        .service(handler_fn(move |req: Request| {
            let bookings = bookings.clone();
            async move { bookings.book(req).await }
        })))
}

impl Bookings {
    async fn book(&self, req: Request) -> Result<Response<Body>, BookingError> {
        let (Some(caller), Some(RequestId(request_id))) = (
            req.extensions().get::<Caller>(),
            req.extensions().get::<RequestId>(),
        ) else {
            return Err(ApiError::Internal.into());
        };
        let key = IdempotencyKey::from_headers(req.headers())?
            .ok_or(KeyError::Missing)?
            .unguessable()?;
        let booking = Booking::parse(req.body().as_ref())?;
        let scope = Scope::new(&caller.addr.to_string(), ROUTE, &key);
        // The fingerprint is over the canonical JSON: the same booking with its fields in
        // another order, or other whitespace, is the same request.
        let canonical = serde_json::json!({ "seat": booking.seat, "guest": booking.guest });
        let fingerprint = fingerprint(&canonical);
        // What a new booking is answered, stored with the key in the same transaction.
        let mut created = json_response(StatusCode::CREATED, &canonical);
        if let Ok(location) = format!("/bookings/{}", booking.seat).parse() {
            created
                .headers_mut()
                .insert(http::header::LOCATION, location);
        }
        let mut effect = BookSeat {
            table: &self.table,
            booking: &booking,
            request_id,
        };
        let outcome = self
            .idempotency
            .commit(&scope, &fingerprint, created, &mut effect)
            .await?;
        Ok(outcome.into_response())
    }
}

/// The effect: the seat's item, put only if the seat is free.
struct BookSeat<'a> {
    table: &'a str,
    booking: &'a Booking,
    request_id: &'a str,
}

impl TransactionEffect for BookSeat<'_> {
    fn items(&mut self) -> Vec<TransactWriteItem> {
        let put = Put::builder()
            .table_name(self.table)
            .item(
                "pk",
                AttributeValue::S(format!("seat#{}", self.booking.seat)),
            )
            .item("guest", AttributeValue::S(self.booking.guest.clone()))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::None)
            .build()
            .expect("table, item and condition are set");
        vec![TransactWriteItem::builder().put(put).build()]
    }

    fn explain(&mut self, reasons: &[CancellationReason]) -> Explained {
        match reasons.first().and_then(|r| r.code()) {
            // Our one condition failed: the seat is taken, for good. Stored under the key.
            Some("ConditionalCheckFailed") => {
                Explained::Refused(BookingError::SeatTaken.to_response(self.request_id))
            }
            // Anything else: what the condition tests changed under us; build and send again.
            _ => Explained::Raced,
        }
    }
}
