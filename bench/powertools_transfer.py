"""The Powertools side of `cargo xtask bench`, part 1.

A transfer under an idempotency key with AWS Lambda Powertools for Python's idempotency utility
(`@idempotent_function`, `DynamoDBPersistenceLayer`), doing the same business write as
Tollgate's `Ledger::transfer`: one TransactWriteItems with the debit (conditioned on existence,
owner, currency and balance), the credit and the transfer record.

Run by the Rust driver (`stress/src/bench/idempotency.rs`) against the same DynamoDB Local, with
the same N and concurrency levels, once without Powertools' local cache and once with it
(`--local-cache-size`). It writes raw latencies (ms), DynamoDB request counts (per HTTP attempt,
from a botocore `before-send` hook) and the capacity DynamoDB reported (botocore hooks that ask
every request for `ReturnConsumedCapacity=TOTAL` and read it back) as JSON; the driver computes
the statistics and bills the capacity, with the same code for both sides.
"""

import argparse
import json
import os
import platform
import secrets
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from importlib.metadata import version

# Outside Lambda: the name Powertools puts in its keys, no tracing, no real AWS.
os.environ.setdefault("AWS_LAMBDA_FUNCTION_NAME", "tollgate-bench-transfer")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")

import boto3  # noqa: E402
from botocore.config import Config  # noqa: E402

from aws_lambda_powertools.utilities.idempotency import (  # noqa: E402
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

CLIENT_ID = "cl_bench"
CURRENCY = "JPY"


class Counter:
    """DynamoDB requests per operation, one per HTTP attempt (retries count)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}

    def hook(self, request, **_):
        target = request.headers.get("X-Amz-Target", b"")
        if isinstance(target, bytes):
            target = target.decode()
        op = target.split(".")[-1] or "unknown"
        with self.lock:
            self.counts[op] = self.counts.get(op, 0) + 1

    def take(self):
        with self.lock:
            counts, self.counts = self.counts, {}
        return counts


# The reads among the operations that report capacity: with TOTAL, DynamoDB gives one
# CapacityUnits figure, read or write by the operation's kind (as the Rust meter counts it).
READS = {"BatchGetItem", "GetItem", "Query", "Scan", "TransactGetItems"}


def item_size(item):
    """An item's size in bytes as DynamoDB counts it, by the same rule as the Rust meter's
    `item_size` (Developer Guide, "Item sizes and formats")."""

    def number(n):
        digits = n.lstrip("-").replace(".", "").lstrip("0").rstrip("0")
        return -(-len(digits) // 2) + 1

    def value(v):
        ((kind, x),) = v.items()
        if kind == "S":
            return len(x.encode())
        if kind == "N":
            return number(x)
        if kind == "B":
            return len(x)
        if kind in ("BOOL", "NULL"):
            return 1
        if kind == "SS":
            return sum(len(e.encode()) for e in x)
        if kind == "NS":
            return sum(number(e) for e in x)
        if kind == "BS":
            return sum(len(e) for e in x)
        if kind == "L":
            return 3 + sum(1 + value(e) for e in x)
        if kind == "M":
            return 3 + sum(1 + len(k.encode()) + value(e) for k, e in x.items())
        return 0

    return sum(len(name.encode()) + value(v) for name, v in item.items())


class Capacity:
    """The capacity DynamoDB reported, per operation, in the Rust meter's shape (OpCapacity):
    answers with ConsumedCapacity and their units, answers without one by error code."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ops = {}

    def ask(self, params, model, **_):
        # Powertools does not ask for it, and must not have to: added to every request whose
        # operation accepts it, as the Rust side's interceptor does.
        if model.input_shape is None or "ReturnConsumedCapacity" not in model.input_shape.members:
            return
        params.setdefault("ReturnConsumedCapacity", "TOTAL")
        if model.name == "TransactWriteItems":
            # DynamoDB Local's figure for a transaction is per table, not AWS's per item: the
            # request's actions are sized here, by the Rust meter's rule (add_transaction).
            with self.lock:
                op = self._op(model.name)
                for action in params.get("TransactItems", []):
                    item = action.get("Put", {}).get("Item")
                    op["transact_items"] += 1
                    op["transact_units"] += max(1, -(-item_size(item) // 1024)) if item else 1

    def _op(self, name):
        return self.ops.setdefault(
            name,
            {
                "measured": 0,
                "read_units": 0.0,
                "write_units": 0.0,
                "unmeasured": {},
                "transact_items": 0,
                "transact_units": 0.0,
            },
        )

    def read(self, http_response, parsed, model, **_):
        if model.input_shape is None or "ReturnConsumedCapacity" not in model.input_shape.members:
            return
        with self.lock:
            op = self._op(model.name)
            consumed = parsed.get("ConsumedCapacity")
            if consumed is None:
                code = parsed.get("Error", {}).get("Code") if http_response.status_code >= 300 else "none"
                op["unmeasured"][code or "unknown"] = op["unmeasured"].get(code or "unknown", 0) + 1
                return
            for entry in consumed if isinstance(consumed, list) else [consumed]:
                if "ReadCapacityUnits" in entry or "WriteCapacityUnits" in entry:
                    op["read_units"] += entry.get("ReadCapacityUnits", 0.0)
                    op["write_units"] += entry.get("WriteCapacityUnits", 0.0)
                elif model.name in READS:
                    op["read_units"] += entry.get("CapacityUnits", 0.0)
                else:
                    op["write_units"] += entry.get("CapacityUnits", 0.0)
            op["measured"] += 1

    def take(self):
        with self.lock:
            ops, self.ops = self.ops, {}
        return ops


class LambdaContextStandIn:
    """What Powertools reads from the Lambda context: a 15-minute invocation."""

    function_name = os.environ["AWS_LAMBDA_FUNCTION_NAME"]

    @staticmethod
    def get_remaining_time_in_millis():
        return 900_000


def create_table(ddb, name, key):
    ddb.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
        KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
    )
    ddb.get_waiter("table_exists").wait(TableName=name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--out", required=True)
    # Powertools' local cache of completed records, with this many entries (0: off, the
    # default of IdempotencyConfig); the driver passes the capacity of Tollgate's own cache.
    ap.add_argument("--local-cache-size", type=int, default=0)
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]

    counter = Counter()
    capacity = Capacity()
    ddb = boto3.client(
        "dynamodb",
        endpoint_url=args.endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        # Enough pooled connections for every worker thread (the default is 10).
        config=Config(max_pool_connections=max(levels) * 2),
    )
    ddb.meta.events.register("before-send.dynamodb", counter.hook)
    ddb.meta.events.register("before-parameter-build.dynamodb", capacity.ask)
    ddb.meta.events.register("after-call.dynamodb", capacity.read)

    prefix = "pt-" + secrets.token_hex(4)
    idem_table, accounts, transfers = (f"{prefix}-{t}" for t in ("idempotency", "accounts", "transfers"))
    # The idempotency table as Powertools documents it: partition key `id`; `expiration`,
    # `status`, `data`, `validation` are written by the persistence layer.
    create_table(ddb, idem_table, "id")
    create_table(ddb, accounts, "pk")
    create_table(ddb, transfers, "pk")
    ddb.update_time_to_live(
        TableName=idem_table,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": "expiration"},
    )

    persistence = DynamoDBPersistenceLayer(table_name=idem_table, boto3_client=ddb)
    config = IdempotencyConfig(
        # The key is scoped to the caller, like Tollgate's (caller, route, key).
        event_key_jmespath="[client_id, idempotency_key]",
        # Payload validation on the body: the same key with another body is refused.
        payload_validation_jmespath="body",
        hash_function="sha256",
        use_local_cache=args.local_cache_size > 0,
        # Its default is 256 entries, fewer than a phase's keys: an LRU that size would be
        # measuring evictions, not the cache, so it gets the capacity Tollgate's cache has.
        local_cache_max_items=max(args.local_cache_size, 1),
    )
    # As in Lambda: Powertools reads the remaining time to set the in-progress expiry.
    config.register_lambda_context(LambdaContextStandIn())

    @idempotent_function(data_keyword_argument="request", persistence_store=persistence, config=config)
    def transfer(request):
        body = request["body"]
        transfer_id = "tr_" + uuid.uuid4().hex[:20]
        created_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        amount = {"N": str(body["amount"])}
        ddb.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": accounts,
                        "Key": {"pk": {"S": body["from"]}},
                        "UpdateExpression": "SET #balance = #balance - :amount",
                        "ConditionExpression": "attribute_exists(#pk) AND #owner = :client AND #currency = :currency AND #balance >= :amount",
                        "ExpressionAttributeNames": {
                            "#pk": "pk",
                            "#balance": "balance",
                            "#owner": "client_id",
                            "#currency": "currency",
                        },
                        "ExpressionAttributeValues": {
                            ":amount": amount,
                            ":client": {"S": request["client_id"]},
                            ":currency": {"S": CURRENCY},
                        },
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                },
                {
                    "Update": {
                        "TableName": accounts,
                        "Key": {"pk": {"S": body["to"]}},
                        "UpdateExpression": "SET #balance = #balance + :amount",
                        "ConditionExpression": "attribute_exists(#pk) AND #currency = :currency",
                        "ExpressionAttributeNames": {"#pk": "pk", "#balance": "balance", "#currency": "currency"},
                        "ExpressionAttributeValues": {":amount": amount, ":currency": {"S": CURRENCY}},
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                },
                {
                    "Put": {
                        "TableName": transfers,
                        "Item": {
                            "pk": {"S": transfer_id},
                            "client_id": {"S": request["client_id"]},
                            "from": {"S": body["from"]},
                            "to": {"S": body["to"]},
                            "amount": amount,
                            "currency": {"S": CURRENCY},
                            "created_at": {"S": created_at},
                            "memo": {"S": body.get("memo", "")},
                        },
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ],
            ClientRequestToken=transfer_id[3:],
        )
        return {
            "status": 201,
            "body": {
                "transfer_id": transfer_id,
                "from": body["from"],
                "to": body["to"],
                "amount": body["amount"],
                "memo": body.get("memo"),
                "created_at": created_at,
            },
        }

    def new_pair():
        ids = []
        for balance in (1_000_000_000, 0):
            account_id = "acc_" + secrets.token_hex(10)
            ddb.put_item(
                TableName=accounts,
                Item={
                    "pk": {"S": account_id},
                    "client_id": {"S": CLIENT_ID},
                    "currency": {"S": CURRENCY},
                    "balance": {"N": str(balance)},
                },
            )
            ids.append(account_id)
        return ids

    def phase(tag, n, pairs):
        workers = len(pairs)
        counter.take()
        capacity.take()

        def work(w):
            src, dst = pairs[w]
            share = n // workers + (1 if w < n % workers else 0)
            lat = []
            for i in range(share):
                request = {
                    "client_id": CLIENT_ID,
                    "idempotency_key": f"{tag}-{w}-{i}",
                    "body": {"from": src, "to": dst, "amount": 1, "memo": "bench"},
                }
                t = time.perf_counter()
                out = transfer(request=request)
                lat.append((time.perf_counter() - t) * 1000.0)
                assert out["status"] == 201, out
            return lat

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            lats = list(pool.map(work, range(workers)))
        wall = time.perf_counter() - started
        return {
            "lat_ms": [x for lat in lats for x in lat],
            "requests": counter.take(),
            "capacity": capacity.take(),
            "wall_s": wall,
        }

    results = {}
    for c in levels:
        pairs = [new_pair() for _ in range(c)]
        phase(f"warm{c}", max(args.warmup, c), pairs)
        new = phase(f"k{c}", args.n, pairs)
        dup = phase(f"k{c}", args.n, pairs)
        per = lambda p: sum(p["requests"].values()) / max(1, len(p["lat_ms"]))  # noqa: E731
        cache = f"local cache {args.local_cache_size}" if args.local_cache_size else "no local cache"
        print(f"powertools c={c} ({cache}): new {per(new):.2f} req/op, dup {per(dup):.2f} req/op", flush=True)
        results[str(c)] = {"new": new, "dup": dup}

    with open(args.out, "w") as f:
        json.dump(
            {
                "versions": {
                    "Python": platform.python_version(),
                    "aws-lambda-powertools": version("aws-lambda-powertools"),
                    "boto3": version("boto3"),
                    "botocore": version("botocore"),
                },
                "results": results,
            },
            f,
        )


if __name__ == "__main__":
    main()
