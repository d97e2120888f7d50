"""The Powertools side of `cargo xtask bench`, part 1.

A transfer under an idempotency key with AWS Lambda Powertools for Python's idempotency utility
(`@idempotent_function`, `DynamoDBPersistenceLayer`), doing the same business write as
Tollgate's `Ledger::transfer`: one TransactWriteItems with the debit (conditioned on existence,
owner, currency and balance), the credit and the transfer record.

Run by the Rust driver (`stress/src/bench/idempotency.rs`) against the same DynamoDB Local, as
one long-lived process the driver commands one line at a time on stdin, so that the driver can
interleave the two sides in blocks (neither measured on a DynamoDB Local the other has not
warmed) without paying an interpreter start per block. Each command is a JSON object, each
answer one line of JSON on stdout (everything else the process prints goes to stderr):

- first, unasked: `{"versions": {...}}`;
- `{"cmd": "setup", "context": name, "workers": w, "local_cache_size": k}`: a context of its
  own (tables, w pairs of accounts, a persistence layer and a decorated function, Powertools'
  local cache with k entries or off for 0), answered `{"ok": true}`;
- `{"cmd": "phase", "context": name, "tag": t, "n": n}`: n transfers over the context's
  workers under keys `t-<worker>-<i>`, answered `{"phase": {...}}` with raw latencies (ms),
  DynamoDB request counts (per HTTP attempt, from a botocore `before-send` hook) and the
  capacity DynamoDB reported (botocore hooks that ask every request for
  `ReturnConsumedCapacity=TOTAL` and read it back); the driver computes the statistics and
  bills the capacity, with the same code for both sides;
- any failure is answered `{"error": traceback}`; end of stdin ends the process.
"""

import argparse
import json
import os
import platform
import secrets
import sys
import threading
import time
import traceback
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


class Context:
    """One mode and concurrency level: tables, accounts and a decorated transfer of its own."""

    def __init__(self, ddb, counter, capacity, local_cache_size, workers):
        self.counter, self.capacity = counter, capacity
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
            use_local_cache=local_cache_size > 0,
            # Its default is 256 entries, fewer than a phase's keys: an LRU that size would be
            # measuring evictions, not the cache, so it gets the capacity Tollgate's cache has.
            local_cache_max_items=max(local_cache_size, 1),
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

        self.transfer = transfer

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

        self.pairs = [new_pair() for _ in range(workers)]

    def phase(self, tag, n):
        """n requests over the context's workers (each sequential), keys `tag-<worker>-<i>`;
        every one must answer 201 (a replay answers the stored 201)."""
        workers = len(self.pairs)
        self.counter.take()
        self.capacity.take()

        def work(w):
            src, dst = self.pairs[w]
            share = n // workers + (1 if w < n % workers else 0)
            lat = []
            for i in range(share):
                request = {
                    "client_id": CLIENT_ID,
                    "idempotency_key": f"{tag}-{w}-{i}",
                    "body": {"from": src, "to": dst, "amount": 1, "memo": "bench"},
                }
                t = time.perf_counter()
                out = self.transfer(request=request)
                lat.append((time.perf_counter() - t) * 1000.0)
                assert out["status"] == 201, out
            return lat

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            lats = list(pool.map(work, range(workers)))
        wall = time.perf_counter() - started
        return {
            "lat_ms": [x for lat in lats for x in lat],
            "requests": self.counter.take(),
            "capacity": self.capacity.take(),
            "wall_s": wall,
        }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    # The most workers any context will have: the client's connection pool is sized for them.
    ap.add_argument("--max-workers", type=int, default=16)
    args = ap.parse_args()

    # The answers are the only thing on stdout; anything else printed goes to stderr.
    answers = sys.stdout
    sys.stdout = sys.stderr

    def answer(value):
        answers.write(json.dumps(value) + "\n")
        answers.flush()

    counter = Counter()
    capacity = Capacity()
    ddb = boto3.client(
        "dynamodb",
        endpoint_url=args.endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        # Enough pooled connections for every worker thread (the default is 10).
        config=Config(max_pool_connections=args.max_workers * 2),
    )
    ddb.meta.events.register("before-send.dynamodb", counter.hook)
    ddb.meta.events.register("before-parameter-build.dynamodb", capacity.ask)
    ddb.meta.events.register("after-call.dynamodb", capacity.read)

    answer(
        {
            "versions": {
                "Python": platform.python_version(),
                "aws-lambda-powertools": version("aws-lambda-powertools"),
                "boto3": version("boto3"),
                "botocore": version("botocore"),
            }
        }
    )
    contexts = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            command = json.loads(line)
            if command["cmd"] == "setup":
                contexts[command["context"]] = Context(
                    ddb, counter, capacity, command["local_cache_size"], command["workers"]
                )
                answer({"ok": True})
            elif command["cmd"] == "phase":
                answer({"phase": contexts[command["context"]].phase(command["tag"], command["n"])})
            else:
                answer({"error": f"unknown command {command['cmd']!r}"})
        except Exception:  # noqa: BLE001 - every failure goes back to the driver, which stops
            answer({"error": traceback.format_exc()})


if __name__ == "__main__":
    main()
