//! The day's traffic, generated from the seed: who sends what, under which key, and what the log
//! therefore calls for. Nothing here depends on timing; what the run does with it does.

pub use fastrand::Rng;

/// An independent stream of the seed for one purpose (traffic, faults, kills): `fastrand`'s
/// wyrand, so a seed gives the same day everywhere.
pub fn fork(seed: u64, stream: u64) -> Rng {
    Rng::with_seed(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F))
}

/// An index chosen by weight.
pub fn weighted(rng: &mut Rng, weights: &[u64]) -> usize {
    let mut x = rng.u64(..weights.iter().sum::<u64>());
    for (i, w) in weights.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    weights.len() - 1
}

/// Opening balances: high enough that no ordinary transfer of the day can meet an empty account
/// (the generator checks it), so a 402 is exactly where the log asks for one.
pub const MIN_BALANCE: u64 = 2_000_000;
pub const MAX_BALANCE: u64 = 5_000_000;
/// Ordinary amounts.
pub const MAX_AMOUNT: u64 = 5_000;

/// What a logical request is, and so what its answer must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// An ordinary transfer: 201.
    Normal,
    /// The client loses the answer (reads and ignores it, or hangs up before it comes) and sends
    /// the same request again, perhaps much later: one transfer, the same 201 bytes.
    LostResponse { hang_up: bool },
    /// 2 to 5 copies sent at once: one transfer; every answer the same 201 bytes (or 409).
    Duplicates(usize),
    /// Settled, then the same key with another body: 422 `idempotency_key_reused` if the first
    /// was stored; if the first never got an answer, whichever was stored first wins.
    KeyReuse,
    /// More than the whole system holds: 402, stored, replayed.
    Insufficient,
    /// `from` is another client's account: 403, stored.
    NotOwner,
    /// `to` does not exist: 404, stored.
    MissingAccount,
    /// A body or key the API refuses: 400, nothing stored.
    BadInput(&'static str),
    /// No valid token: 401, nothing stored.
    BadToken(&'static str),
    /// A sequence of its own, from a client of its own ([`super::sequences`]): the answer (a
    /// 201) is lost, the client fills its `client` layer with other requests, and the retry
    /// with the same key gets 429 while the layer is full, then the original 201 replayed.
    LostAfterFull,
    /// The transaction's first attempt lands late (after the function answered; `committed
    /// first`: at once, its answer lost) and every resend meets `TransactionInProgress` until
    /// the ledger gives up: 201, or the outcome-unknown 503, never "nothing committed".
    InFlight { committed_first: bool },
    /// One of the requests of a sequence (filling a layer, or a burst across a sliding
    /// boundary whose increments are delayed): 201, after any 429s.
    Burst,
}

impl Kind {
    pub fn label(&self) -> &'static str {
        match self {
            Kind::Normal => "ordinary transfer",
            Kind::LostResponse { hang_up: false } => "lost response (ignored), resent",
            Kind::LostResponse { hang_up: true } => "lost response (hung up), resent",
            Kind::Duplicates(_) => "2-5 concurrent duplicates",
            Kind::KeyReuse => "key reused with a changed body",
            Kind::Insufficient => "insufficient funds",
            Kind::NotOwner => "from another client's account",
            Kind::MissingAccount => "to a missing account",
            Kind::BadInput(_) => "bad input",
            Kind::BadToken(_) => "no valid token",
            Kind::LostAfterFull => "sequence: lost answer, retried after the client layer filled",
            Kind::InFlight {
                committed_first: false,
            } => "sequence: transaction still in flight (lands after the answer), TransactionInProgress until the ledger gives up",
            Kind::InFlight {
                committed_first: true,
            } => "sequence: transaction committed with its answer lost, then TransactionInProgress until the ledger gives up",
            Kind::Burst => "sequence: filling a sliding client layer, or crossing its boundary with increments delayed",
        }
    }

    /// The status the log calls for on the first body.
    pub fn expected(&self) -> u16 {
        match self {
            Kind::Normal
            | Kind::LostResponse { .. }
            | Kind::Duplicates(_)
            | Kind::KeyReuse
            | Kind::LostAfterFull
            | Kind::InFlight { .. }
            | Kind::Burst => 201,
            Kind::Insufficient => 402,
            Kind::NotOwner => 403,
            Kind::MissingAccount => 404,
            Kind::BadInput(_) => 400,
            Kind::BadToken(_) => 401,
        }
    }
}

/// One transfer as the client asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    pub from: String,
    pub to: String,
    pub amount: u64,
    pub memo: Option<String>,
    /// The bytes sent.
    pub raw: String,
}

impl Body {
    pub fn new(from: &str, to: &str, amount: u64, memo: Option<String>) -> Self {
        let mut v = serde_json::json!({"from": from, "to": to, "amount": amount});
        if let Some(m) = &memo {
            v["memo"] = serde_json::Value::String(m.clone());
        }
        Self {
            from: from.into(),
            to: to.into(),
            amount,
            memo,
            raw: v.to_string(),
        }
    }

    fn raw(raw: String) -> Self {
        Self {
            from: String::new(),
            to: String::new(),
            amount: 0,
            memo: None,
            raw,
        }
    }
}

/// One logical request: a key, a body (two for key reuse), and how the client behaves.
#[derive(Debug, Clone)]
pub struct Logical {
    pub index: usize,
    pub kind: Kind,
    pub client: usize,
    /// `None`: sent without an `Idempotency-Key` (a bad-input case).
    pub key: Option<String>,
    pub bodies: Vec<Body>,
    /// The `Authorization` header, when it is not the client's own token.
    pub bad_auth: Option<Option<String>>,
    /// Retries after a transient failure (and the resend after a lost answer) wait this many
    /// other requests first: "much later", in simulated time.
    pub later: Option<usize>,
}

/// The accounts and clients of the day, before they exist.
pub struct Population {
    /// Opening balance and owner (client index) per account.
    pub accounts: Vec<(u64, usize)>,
    pub clients: usize,
}

impl Population {
    pub fn new(rng: &mut Rng, clients: usize, accounts: usize) -> Self {
        Self {
            accounts: (0..accounts)
                .map(|i| (rng.u64(MIN_BALANCE..=MAX_BALANCE), i % clients))
                .collect(),
            clients,
        }
    }

    pub fn total(&self) -> u64 {
        self.accounts.iter().map(|(b, _)| b).sum()
    }
}

/// Generates logical requests for ever (the run stops taking them once it has sent enough).
pub struct Generator {
    rng: Rng,
    /// Per account: the most an ordinary transfer of the day may take from it, summed.
    debits: Vec<u64>,
    openings: Vec<u64>,
    owned: Vec<Vec<usize>>,
    total: u64,
    seed: u64,
    next: usize,
}

const BAD_INPUTS: &[&str] = &[
    "amount zero",
    "amount as a string",
    "amount with a fraction",
    "from equals to",
    "unknown field",
    "not JSON",
    "memo too long",
    "no Idempotency-Key",
    "Idempotency-Key too long",
];
const BAD_TOKENS: &[&str] = &["wrong token", "no Authorization", "not a bearer token"];

impl Generator {
    pub fn new(seed: u64, pop: &Population) -> Self {
        let mut owned = vec![Vec::new(); pop.clients];
        for (i, (_, owner)) in pop.accounts.iter().enumerate() {
            owned[*owner].push(i);
        }
        Self {
            rng: fork(seed, 1),
            debits: vec![0; pop.accounts.len()],
            openings: pop.accounts.iter().map(|(b, _)| *b).collect(),
            owned,
            total: pop.total(),
            seed,
            next: 0,
        }
    }

    /// The next logical request; `ids` are the real account ids, by index.
    pub fn next(&mut self, ids: &[String]) -> Logical {
        let index = self.next;
        self.next += 1;
        let r = &mut self.rng;
        let client = r.usize(..self.owned.len());
        let key = format!("replay-{:x}-{index}", self.seed);
        // Weights per mille.
        let kind = match weighted(r, &[560, 100, 60, 40, 50, 30, 30, 15, 40, 40, 35]) {
            0 => Kind::Normal,
            1 => Kind::LostResponse { hang_up: false },
            2 => Kind::LostResponse { hang_up: true },
            3 => Kind::Duplicates(r.u64(2..=5) as usize),
            4 => Kind::KeyReuse,
            5 => Kind::Insufficient,
            6 => Kind::NotOwner,
            7 => Kind::MissingAccount,
            8 | 9 => Kind::BadInput(BAD_INPUTS[r.usize(..BAD_INPUTS.len())]),
            _ => Kind::BadToken(BAD_TOKENS[r.usize(..BAD_TOKENS.len())]),
        };
        let later = (r.f64() < 0.15).then(|| r.u64(200..=4_000) as usize);
        let mine = &self.owned[client];
        let from = mine[r.usize(..mine.len())];
        let mut to = r.usize(..ids.len());
        if to == from {
            to = (to + 1) % ids.len();
        }
        let memo = (r.f64() < 0.5).then(|| format!("invoice {}", r.u64(..1_000_000)));
        let amount = r.u64(1..=MAX_AMOUNT);
        let mut bodies = Vec::new();
        let mut key = Some(key);
        let mut bad_auth = None;
        match &kind {
            Kind::Normal | Kind::LostResponse { .. } | Kind::Duplicates(_) | Kind::KeyReuse => {
                // The day's ordinary debits never empty an account: the generator's promise.
                let n = if kind == Kind::KeyReuse { 2 } else { 1 };
                let mut from = from;
                let mut tries = 0;
                while self.debits[from] + n * (amount + 1) > self.openings[from] {
                    from = mine[(tries + 1) % mine.len()];
                    tries += 1;
                    assert!(tries <= mine.len(), "client {client}'s accounts are exhausted: use fewer requests or more accounts");
                }
                self.debits[from] += n * (amount + 1);
                bodies.push(Body::new(&ids[from], &ids[to], amount, memo.clone()));
                if kind == Kind::KeyReuse {
                    // Another amount, or another memo.
                    let changed = if r.f64() < 0.5 {
                        Body::new(&ids[from], &ids[to], amount + 1, memo)
                    } else {
                        Body::new(
                            &ids[from],
                            &ids[to],
                            amount,
                            Some(format!("changed {index}")),
                        )
                    };
                    bodies.push(changed);
                }
            }
            Kind::Insufficient => {
                let amount = self.total + r.u64(1..=1_000_000);
                bodies.push(Body::new(&ids[from], &ids[to], amount, memo));
            }
            Kind::NotOwner => {
                let other = (client + 1 + r.usize(..self.owned.len() - 1)) % self.owned.len();
                let theirs = &self.owned[other];
                let from = theirs[r.usize(..theirs.len())];
                let to = if to == from { (to + 1) % ids.len() } else { to };
                bodies.push(Body::new(&ids[from], &ids[to], amount, memo));
            }
            Kind::MissingAccount => {
                let missing = format!("acc_missing{:x}{index}", self.seed);
                bodies.push(Body::new(&ids[from], &missing, amount, memo));
            }
            Kind::BadInput(what) => {
                let (f, t) = (&ids[from], &ids[to]);
                let raw = match *what {
                    "amount zero" => format!(r#"{{"from":"{f}","to":"{t}","amount":0}}"#),
                    "amount as a string" => {
                        format!(r#"{{"from":"{f}","to":"{t}","amount":"{amount}"}}"#)
                    }
                    "amount with a fraction" => {
                        format!(r#"{{"from":"{f}","to":"{t}","amount":{amount}.5}}"#)
                    }
                    "from equals to" => format!(r#"{{"from":"{f}","to":"{f}","amount":{amount}}}"#),
                    "unknown field" => {
                        format!(r#"{{"from":"{f}","to":"{t}","amount":{amount},"fee":1}}"#)
                    }
                    "not JSON" => format!("from={f}&to={t}&amount={amount}"),
                    "memo too long" => format!(
                        r#"{{"from":"{f}","to":"{t}","amount":{amount},"memo":"{}"}}"#,
                        "x".repeat(141)
                    ),
                    "no Idempotency-Key" => {
                        key = None;
                        Body::new(f, t, amount, None).raw
                    }
                    _ => {
                        key = Some(format!("{}-{}", key.unwrap_or_default(), "k".repeat(256)));
                        Body::new(f, t, amount, None).raw
                    }
                };
                bodies.push(Body::raw(raw));
            }
            // The sequences' own kinds: made by `sequences`, never drawn here.
            Kind::LostAfterFull | Kind::InFlight { .. } | Kind::Burst => {
                unreachable!("not in the generator's weights")
            }
            Kind::BadToken(what) => {
                bad_auth = Some(match *what {
                    "wrong token" => Some(format!("Bearer tg_{:032x}", r.u64(..))),
                    "no Authorization" => None,
                    _ => Some(format!("Basic {:016x}", r.u64(..))),
                });
                bodies.push(Body::new(&ids[from], &ids[to], amount, memo));
            }
        }
        Logical {
            index,
            kind,
            client,
            key,
            bodies,
            bad_auth,
            later,
        }
    }
}
