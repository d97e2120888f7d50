//! Lambda entry point: everything lives in the library; see [`ephemeral_key::App`].

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    tollgate_functions::serve::run::<ephemeral_key::App>().await
}
