//! A load balancer on loopback in front of console replicas, as a Kubernetes Service is: each
//! connection goes to the next replica whose `/readyz` answered 200 at the last check (twice a
//! second), and to the one after it when that refuses the connection.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// The proxy; it stops when dropped.
pub struct Proxy {
    pub base: String,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Proxy {
    /// A proxy to the replicas listening on `ports` of 127.0.0.1.
    pub async fn start(ports: &[u16]) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let ports = ports.to_vec();
        let ready: Arc<Mutex<Vec<bool>>> = Arc::new(Mutex::new(vec![false; ports.len()]));
        let checker = {
            let (ports, ready) = (ports.clone(), ready.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::builder()
                    .timeout(Duration::from_secs(1))
                    .pool_max_idle_per_host(0)
                    .build()
                    .unwrap();
                loop {
                    for (i, port) in ports.iter().enumerate() {
                        let url = format!("http://127.0.0.1:{port}/readyz");
                        let ok = client
                            .get(&url)
                            .send()
                            .await
                            .is_ok_and(|r| r.status() == 200);
                        ready.lock().unwrap()[i] = ok;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            })
        };
        let acceptor = tokio::spawn(async move {
            let mut next = 0usize;
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                let order: Vec<u16> = {
                    let ready = ready.lock().unwrap();
                    (0..ports.len())
                        .map(|i| (next + i) % ports.len())
                        .filter(|i| ready[*i])
                        .map(|i| ports[i])
                        .collect()
                };
                next = next.wrapping_add(1);
                tokio::spawn(async move {
                    for port in order {
                        if let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", port)).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            return;
                        }
                    }
                });
            }
        });
        Proxy {
            base,
            tasks: vec![checker, acceptor],
        }
    }
}
