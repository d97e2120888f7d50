//! A function: K processes of its binary, each polling its own runtime API endpoint over one
//! shared queue, and [`Pool::invoke`].
//!
//! A process is watched by a task that owns its `Child`: when it exits (or is SIGKILLed on
//! request) the task tells its endpoint, which answers the invocations it held with a crash
//! (502 to the caller, as Lambda answers when a function dies). Lambda replaces a dead
//! instance on the next demand; here the caller decides ([`Pool::spawn_instance`]), so a
//! run can count what it did.

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use tokio::process::Command;
use tokio::sync::{oneshot, watch};
use tollgate_tests::events::HttpEvent;

use super::response::parse;
use super::runtime_api::{Endpoint, Invocation, Queue, Reply};
use super::{Error, Lost};

/// How long a process may take from spawn to its first poll.
const INIT_TIMEOUT: Duration = Duration::from_secs(30);

/// What to run, and how.
#[derive(Debug, Clone)]
pub struct PoolSpec {
    /// The function's name (`transfer`, `ephemeral-key`): the event's function ARN, the ids.
    pub name: String,
    /// Its binary (a `bootstrap`, as Lambda would run it).
    pub binary: PathBuf,
    /// Its variables, on top of this process's environment.
    pub env: Vec<(String, String)>,
    /// Where its processes' stdout and stderr go (appended); `None` discards them.
    pub log: Option<PathBuf>,
    /// How long an invocation may take before it is [`Lost`].
    pub timeout: Duration,
}

/// The caller's address in the event's request context (`requestContext.http.sourceIp`):
/// put it in a request's extensions; without it, 127.0.0.1, as for a local client.
#[derive(Debug, Clone, Copy)]
pub struct SourceIp(pub IpAddr);

/// One running process.
struct Instance {
    pid: u32,
    endpoint: Arc<Endpoint>,
    kill: Option<oneshot::Sender<()>>,
    exited: watch::Receiver<bool>,
}

/// A function's pool of processes.
pub struct Pool {
    spec: Mutex<PoolSpec>,
    queue: Arc<Queue>,
    instances: Mutex<Vec<Instance>>,
    next_id: AtomicU64,
}

impl Pool {
    /// Starts `instances` processes and waits until each polls for work.
    pub async fn start(spec: PoolSpec, instances: usize) -> Result<Arc<Pool>, Error> {
        let function = Arc::new(Pool {
            spec: Mutex::new(spec),
            queue: Queue::new(),
            instances: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
        });
        for _ in 0..instances {
            function.spawn_instance().await?;
        }
        Ok(function)
    }

    pub fn name(&self) -> String {
        self.spec.lock().expect("spec").name.clone()
    }

    /// The pids of the processes running now.
    pub fn pids(&self) -> Vec<u32> {
        let instances = self.instances.lock().expect("instances");
        instances
            .iter()
            .filter(|i| !*i.exited.borrow())
            .map(|i| i.pid)
            .collect()
    }

    /// Starts one more process; its pid once it polls for work.
    pub async fn spawn_instance(&self) -> Result<u32, Error> {
        let spec = self.spec.lock().expect("spec").clone();
        let (ready_tx, ready) = oneshot::channel();
        let endpoint = Arc::new(
            Endpoint::start(&spec.name, self.queue.clone(), ready_tx)
                .await
                .map_err(Error::Listen)?,
        );
        let mut cmd = Command::new(&spec.binary);
        cmd.env("AWS_LAMBDA_RUNTIME_API", &endpoint.address)
            .env("AWS_LAMBDA_FUNCTION_NAME", &spec.name)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env(
                "AWS_LAMBDA_LOG_GROUP_NAME",
                format!("/aws/lambda/{}", spec.name),
            )
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "tollgate-stress")
            .env("LAMBDA_TASK_ROOT", "/var/task")
            .env("TZ", ":UTC")
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        match &spec.log {
            Some(path) => {
                let log = |path: &PathBuf| {
                    File::options()
                        .create(true)
                        .append(true)
                        .open(path)
                        .map_err(|source| Error::Log {
                            path: path.display().to_string(),
                            source,
                        })
                };
                cmd.stdout(log(path)?).stderr(log(path)?);
            }
            None => {
                cmd.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        let mut child = cmd.spawn().map_err(|source| Error::Spawn {
            binary: spec.binary.display().to_string(),
            source,
        })?;
        let pid = child.id().unwrap_or(0);
        let (kill, kill_rx) = oneshot::channel::<()>();
        let (exited_tx, exited) = watch::channel(false);
        {
            let endpoint = endpoint.clone();
            tokio::spawn(async move {
                let status = tokio::select! {
                    status = child.wait() => status,
                    _ = kill_rx => {
                        let _ = child.start_kill();
                        child.wait().await
                    }
                };
                let why = match status {
                    Ok(status) => format!("process {pid} exited ({status})"),
                    Err(e) => format!("process {pid} could not be waited for: {e}"),
                };
                endpoint.die(&why);
                exited_tx.send_replace(true);
            });
        }
        self.instances.lock().expect("instances").push(Instance {
            pid,
            endpoint,
            kill: Some(kill),
            exited,
        });
        let failed = |why: String| Error::Init {
            function: spec.name.clone(),
            why,
        };
        match tokio::time::timeout(INIT_TIMEOUT, ready).await {
            Ok(Ok(Ok(()))) => Ok(pid),
            Ok(Ok(Err(why))) => {
                let _ = self.kill(pid).await;
                Err(failed(why))
            }
            Ok(Err(_)) => Err(failed("its runtime API went away".into())),
            Err(_) => {
                let _ = self.kill(pid).await;
                Err(failed(format!(
                    "no poll within {}s",
                    INIT_TIMEOUT.as_secs()
                )))
            }
        }
    }

    /// SIGKILLs process `pid` and waits until its death was handled (its invocations answered
    /// 502); it leaves the pool.
    pub async fn kill(&self, pid: u32) -> Result<(), Error> {
        let instance = {
            let mut instances = self.instances.lock().expect("instances");
            let at = instances.iter().position(|i| i.pid == pid);
            at.map(|at| instances.remove(at))
        };
        let Some(mut instance) = instance else {
            return Err(Error::NoSuchProcess {
                function: self.name(),
                pid,
            });
        };
        if let Some(kill) = instance.kill.take() {
            let _ = kill.send(());
        }
        let _ = instance.exited.wait_for(|exited| *exited).await;
        drop(instance.endpoint);
        Ok(())
    }

    /// Kills every process and starts as many again, with `env` on top of the function's
    /// variables from now on (drill's second pass: `RATE_LIMIT_BLOCK_CACHE_SIZE=0`).
    pub async fn restart(&self, env: &[(String, String)]) -> Result<(), Error> {
        let n = self.stop().await;
        self.spec.lock().expect("spec").env.extend_from_slice(env);
        for _ in 0..n {
            self.spawn_instance().await?;
        }
        Ok(())
    }

    /// Kills every process; how many there were.
    pub async fn stop(&self) -> usize {
        let pids: Vec<u32> = {
            let instances = self.instances.lock().expect("instances");
            instances.iter().map(|i| i.pid).collect()
        };
        for &pid in &pids {
            let _ = self.kill(pid).await;
        }
        pids.len()
    }

    /// Invokes the function with `req` as API Gateway would (an HTTP API v2 event from the
    /// one event builder), and returns its answer: 502 if the process died or the function
    /// reported an error, [`Lost`] if no answer came within the timeout.
    ///
    /// The event is queued when the returned future is first polled: dropping it after that
    /// (a client hanging up) leaves the invocation to run, as it would on Lambda.
    pub async fn invoke(&self, req: Request<Bytes>) -> Result<Response<Bytes>, Lost> {
        let source_ip = req
            .extensions()
            .get::<SourceIp>()
            .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |s| s.0);
        self.invoke_event(&HttpEvent::from_http(&req, &source_ip.to_string()))
            .await
    }

    /// Invokes the function with an event made by the event builder.
    pub async fn invoke_event(&self, event: &HttpEvent) -> Result<Response<Bytes>, Lost> {
        let (name, timeout) = {
            let spec = self.spec.lock().expect("spec");
            (spec.name.clone(), spec.timeout)
        };
        let id = format!("{name}-{:08}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let event = event.clone().request_id(&id).to_json().to_string();
        let (reply, answer) = oneshot::channel();
        self.queue.push(Invocation {
            id,
            event: Bytes::from(event),
            timeout,
            reply,
        });
        match tokio::time::timeout(timeout, answer).await {
            Err(_) => Err(Lost::Timeout(timeout)),
            Ok(Err(_)) => Err(Lost::Stopped(name)),
            Ok(Ok(Reply::Response(body))) => parse(&body),
            // What a function URL answers when the function failed.
            Ok(Ok(Reply::Error(_) | Reply::Crashed(_))) => Ok(super::answer(
                StatusCode::BAD_GATEWAY,
                r#"{"Message":"Internal Server Error"}"#,
            )),
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // The watch tasks own the children (`kill_on_drop`); telling them ends the processes.
        if let Ok(instances) = self.instances.get_mut() {
            for instance in instances.iter_mut() {
                if let Some(kill) = instance.kill.take() {
                    let _ = kill.send(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A custom runtime in shell and curl, as small as the runtime API allows: it answers
    /// every event with 200 and the event's raw path as body, except `/hang`, which it holds
    /// (so a kill finds it in flight); the last event it got is in the file `$EVENT`.
    const RUNTIME: &str = r#"
api="http://$AWS_LAMBDA_RUNTIME_API/2018-06-01/runtime"
while true; do
  event=$(curl -sS -D /dev/stderr "$api/invocation/next" 2>"$HEADERS") || exit 1
  printf '%s' "$event" > "$EVENT"
  id=$(grep -i '^lambda-runtime-aws-request-id:' "$HEADERS" | cut -d' ' -f2 | tr -d '\r')
  path=$(printf '%s' "$event" | sed 's/.*"rawPath":"\([^"]*\)".*/\1/')
  if [ "$path" = /hang ]; then sleep 600; fi
  curl -sS -X POST -d "{\"statusCode\":200,\"headers\":{\"x-fn\":\"$AWS_LAMBDA_FUNCTION_NAME\"},\"cookies\":[],\"body\":\"$path\"}" \
    "$api/invocation/$id/response" >/dev/null
done
"#;

    fn spec(dir: &std::path::Path) -> PoolSpec {
        let script = dir.join("runtime.sh");
        std::fs::write(&script, format!("#!/bin/sh\n{RUNTIME}")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        PoolSpec {
            name: "echo".into(),
            binary: script,
            env: vec![
                ("HEADERS".into(), dir.join("headers").display().to_string()),
                ("EVENT".into(), dir.join("event.json").display().to_string()),
            ],
            log: None,
            timeout: Duration::from_secs(20),
        }
    }

    fn get(path: &str) -> Request<Bytes> {
        Request::get(path).body(Bytes::new()).unwrap()
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tollgate-stress-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[tokio::test]
    async fn invokes_kills_with_a_502_and_replaces() {
        let dir = temp_dir("pool");
        let f = Pool::start(spec(&dir), 1).await.unwrap();
        let resp = f.invoke(get("/hello?x=1")).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["x-fn"], "echo");
        assert_eq!(resp.body().as_ref(), b"/hello");

        // An invocation held by a process that is killed answers 502.
        let pid = f.pids()[0];
        let held = {
            let f = f.clone();
            tokio::spawn(async move { f.invoke(get("/hang")).await })
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        f.kill(pid).await.unwrap();
        let resp = held.await.unwrap().unwrap();
        assert_eq!(resp.status(), 502);
        assert!(f.pids().is_empty());

        // Queued with no process: waits for the replacement.
        let queued = {
            let f = f.clone();
            tokio::spawn(async move { f.invoke(get("/later")).await })
        };
        let new = f.spawn_instance().await.unwrap();
        assert_ne!(new, pid);
        assert_eq!(queued.await.unwrap().unwrap().body().as_ref(), b"/later");
        f.stop().await;
        let _ = std::fs::remove_dir_all(dir);
    }

    /// `req` through the front at `url`: its status and body.
    async fn fetch(url: &str, req: Request<http_body_util::Empty<Bytes>>) -> (StatusCode, Bytes) {
        let stream = tokio::net::TcpStream::connect(url.trim_start_matches("http://"))
            .await
            .unwrap();
        let io = hyper_util::rt::TokioIo::new(stream);
        let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        let resp = send.send_request(req).await.unwrap();
        let status = resp.status();
        let body = http_body_util::BodyExt::collect(resp.into_body()).await;
        (status, body.unwrap().to_bytes())
    }

    /// The front strips its prefix and answers 404 elsewhere; two `Idempotency-Key` fields (and
    /// two `Authorization` fields) reach the function as API Gateway's payload 2.0 hands them
    /// over: one field each, the values joined with commas, which the functions refuse as a list
    /// (not the first key, silently).
    #[tokio::test]
    async fn the_front_strips_its_prefix_and_joins_repeated_fields_as_api_gateway_does() {
        let dir = temp_dir("front");
        let f = Pool::start(spec(&dir), 1).await.unwrap();
        let front = super::super::Front::start(vec![("/lambda-url/echo".into(), f.clone())])
            .await
            .unwrap();
        let get = |path: &str| Request::get(path).header("host", "x");
        let empty = http_body_util::Empty::<Bytes>::new;
        let (status, body) = fetch(
            &front.url(),
            get("/lambda-url/echo/accounts/a1").body(empty()).unwrap(),
        )
        .await;
        assert_eq!(
            (status.as_u16(), body.as_ref()),
            (200, &b"/accounts/a1"[..])
        );
        let other = get("/lambda-url/other/x").body(empty()).unwrap();
        assert_eq!(fetch(&front.url(), other).await.0, 404);

        let req = Request::post("/lambda-url/echo/transfers")
            .header("host", "x")
            .header("idempotency-key", "k1")
            .header("authorization", "Bearer a")
            .header("idempotency-key", "k2")
            .header("authorization", "Bearer b")
            .body(empty())
            .unwrap();
        assert_eq!(fetch(&front.url(), req).await.0, 200);
        let event: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("event.json")).unwrap()).unwrap();
        assert_eq!(event["headers"]["idempotency-key"], "k1,k2", "{event}");
        assert_eq!(
            event["headers"]["authorization"], "Bearer a,Bearer b",
            "{event}"
        );
        f.stop().await;
        let _ = std::fs::remove_dir_all(dir);
    }
}
