//! Lambda entry point: everything lives in the library; see [`transfer::App`].

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    tollgate_functions::serve::run::<transfer::App>().await
}
