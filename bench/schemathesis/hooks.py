"""Schemathesis hooks of `cargo xtask bench`, part 4 (`schemathesis.toml` loads this file).

Replaces, in the schema Schemathesis loaded (never in `openapi.yaml`), the document's example
account ids with the two accounts of the bench's stack, so the examples reach a 201 and the
stateful phase can follow its `Location` to `GET /transfers/{id}`: random or documented ids
would only ever meet 404. The harness (`stress/src/bench/schemathesis/`) seeds the accounts and
passes their ids in `TOLLGATE_BENCH_PAYER` and `TOLLGATE_BENCH_PAYEE`; only the bank client's
run sets them, so the other runs test the document as written.
"""

import os

import schemathesis


@schemathesis.hook
def before_load_schema(context, raw_schema):
    payer = os.environ.get("TOLLGATE_BENCH_PAYER")
    payee = os.environ.get("TOLLGATE_BENCH_PAYEE")
    if not payer or not payee:
        return
    schemas = raw_schema["components"]["schemas"]
    schemas["AccountId"]["examples"] = [payer, payee]
    schemas["TransferRequest"]["examples"] = [
        {"from": payer, "to": payee, "amount": 2500, "memo": "rent"}
    ]
    for parameter in raw_schema["paths"]["/accounts/{id}"]["get"]["parameters"]:
        if parameter["name"] == "id":
            parameter["schema"]["examples"] = [payer, payee]
