//! `openapi.yaml` against the real functions.
//!
//! The conformance tests drive both functions in process (DynamoDB Local, OpenAI stood in by
//! wiremock) into as many distinct responses as they can, and check each one against the
//! document with [`spec::Checker`]. Each test is declared below with the (operation, status)
//! pairs it produces; it asserts that it produced exactly those, and
//! `coverage::every_documented_status_is_exercised` asserts that together they produce every
//! status the document lists (or that the status is in `coverage::NOT_PRODUCIBLE` with a
//! reason). A status the document lists and nobody checks cannot creep in unnoticed.
//!
//! `lint` has Redocly CLI check the document's own structure and the project's conventions for
//! it (`redocly.yaml` at the repository root). `document` holds the other checks that need no
//! running function: its error catalogue against the library's, and its request schema against
//! the transfer parser. `validator` proves the response validator of `spec` goes red on drift.

mod cors;
mod coverage;
mod document;
mod lint;
mod operator;
mod session;
mod spec;
mod transfers;
mod validator;

/// Declares conformance tests: `module::test => [("METHOD /path", status), ...];`. The test
/// runs `module::test(&checker)` and asserts the checker saw exactly the listed pairs.
macro_rules! conformance {
    ($($module:ident :: $name:ident => [$(($op:expr, $status:expr)),* $(,)?];)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let checker = crate::openapi::spec::Checker::new(stringify!($name));
                crate::openapi::$module::$name(&checker).await;
                checker.assert_exercised(&[$(($op, $status)),*]);
            }
        )*

        /// Every conformance test and the (operation, status) pairs it produces.
        pub const EXERCISED: &[(&str, &[(&str, u16)])] =
            &[$((stringify!($name), &[$(($op, $status)),*])),*];
    };
}

mod conformance {
    use crate::openapi::spec::UNKNOWN_ROUTE;

    const SESSION: &str = "POST /session";
    const GET_SWITCH: &str = "GET /internal/kill-switch";
    const PUT_SWITCH: &str = "PUT /internal/kill-switch";
    const POST_TRANSFERS: &str = "POST /transfers";
    const GET_TRANSFER: &str = "GET /transfers/{id}";
    const GET_ACCOUNT: &str = "GET /accounts/{id}";

    conformance! {
        transfers::transfer_created_replayed_and_read => [
            (POST_TRANSFERS, 201), (GET_TRANSFER, 200), (GET_ACCOUNT, 200),
            (GET_TRANSFER, 404), (GET_ACCOUNT, 404),
        ];
        transfers::transfer_refusals_are_stored_and_replayed => [
            (POST_TRANSFERS, 402), (POST_TRANSFERS, 403), (POST_TRANSFERS, 404),
            (POST_TRANSFERS, 422),
        ];
        transfers::transfer_bad_requests_and_credentials => [
            (POST_TRANSFERS, 400), (POST_TRANSFERS, 401), (POST_TRANSFERS, 413),
            (GET_TRANSFER, 401), (GET_ACCOUNT, 401), (GET_TRANSFER, 413), (GET_ACCOUNT, 413),
        ];
        transfers::transfer_in_progress => [(POST_TRANSFERS, 409)];
        transfers::transfer_routing => [
            (UNKNOWN_ROUTE, 404), (POST_TRANSFERS, 405), (GET_TRANSFER, 405), (GET_ACCOUNT, 405),
        ];
        transfers::transfer_rate_limited => [
            (GET_ACCOUNT, 200), (POST_TRANSFERS, 429), (GET_TRANSFER, 429), (GET_ACCOUNT, 429),
        ];
        transfers::transfer_kill_switch => [
            (POST_TRANSFERS, 403), (GET_TRANSFER, 403), (GET_ACCOUNT, 403),
        ];
        transfers::transfer_behind_cloudfront => [
            (POST_TRANSFERS, 403), (GET_TRANSFER, 403), (GET_ACCOUNT, 403),
            (POST_TRANSFERS, 400), (GET_TRANSFER, 400), (GET_ACCOUNT, 400),
        ];
        transfers::transfer_internal_error => [
            (POST_TRANSFERS, 500), (GET_TRANSFER, 500), (GET_ACCOUNT, 500),
        ];
        transfers::transfer_unavailable => [
            (POST_TRANSFERS, 503), (GET_TRANSFER, 503), (GET_ACCOUNT, 503),
        ];
        session::session_minted_replayed_and_reused => [(SESSION, 200), (SESSION, 422)];
        session::session_bad_requests => [(SESSION, 400), (SESSION, 413)];
        session::session_in_progress => [(SESSION, 200), (SESSION, 409)];
        session::session_rate_limited => [(SESSION, 200), (SESSION, 429)];
        session::session_kill_switch_and_cloudfront => [
            (SESSION, 403), (SESSION, 400),
        ];
        session::session_upstream_failures => [(SESSION, 503), (SESSION, 500)];
        session::session_routing => [(SESSION, 405), (UNKNOWN_ROUTE, 404)];
        operator::operator_reads_and_flips => [
            (GET_SWITCH, 200), (GET_SWITCH, 400), (GET_SWITCH, 401), (GET_SWITCH, 405),
            (PUT_SWITCH, 200), (PUT_SWITCH, 400), (PUT_SWITCH, 401), (PUT_SWITCH, 405),
            (PUT_SWITCH, 413), (GET_SWITCH, 413),
        ];
        operator::operator_rate_limited => [
            (GET_SWITCH, 401), (GET_SWITCH, 429), (PUT_SWITCH, 429),
        ];
        operator::operator_behind_cloudfront => [
            (GET_SWITCH, 403), (PUT_SWITCH, 403), (GET_SWITCH, 400), (PUT_SWITCH, 400),
        ];
        operator::operator_internal_error => [(GET_SWITCH, 500), (PUT_SWITCH, 500)];
        operator::operator_unavailable => [(GET_SWITCH, 503), (PUT_SWITCH, 503)];
        cors::cors_preflights_and_cross_origin_answers => [
            ("OPTIONS /session", 204), ("OPTIONS /session", 405),
            ("OPTIONS /internal/kill-switch", 204), ("OPTIONS /internal/kill-switch", 405),
            ("OPTIONS /transfers", 204), ("OPTIONS /transfers", 405),
            ("OPTIONS /transfers/{id}", 204), ("OPTIONS /transfers/{id}", 405),
            ("OPTIONS /accounts/{id}", 204), ("OPTIONS /accounts/{id}", 405),
            (SESSION, 200), (SESSION, 429), (GET_SWITCH, 200),
            (POST_TRANSFERS, 201), (GET_ACCOUNT, 200), (UNKNOWN_ROUTE, 404),
        ];
    }
}
