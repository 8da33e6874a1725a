//! What a secured test broker needs, made by the test: a private CA and the certificates it
//! signs ([`Pki`], with the `openssl` command), and an OpenID Connect token endpoint on
//! loopback ([`Oidc`]) that issues RS256 JWTs for the client credentials grant and serves the
//! JWKS the broker validates them with.
//!
//! [`start_secured`] starts a node with one listener per way a managed cluster is reached
//! (see [`Listener`]); its SCRAM users are added when the storage is formatted, its PLAIN
//! users are in the listener's JAAS configuration.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;

use super::broker::{Extra, Kafka};

/// The SASL user of every mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
pub const USER: &str = "alice";
/// Its password: a comma, an equals sign and a semicolon in it, as real ones have.
pub const PASSWORD: &str = "alice-s3cret,with=odd;chars";
/// The SCRAM password of [`USER`] (Kafka's `--add-scram` takes no comma or `=` in it).
pub const SCRAM_PASSWORD: &str = "alice-scram-s3cret;odd";
/// Azure Event Hubs' SASL/PLAIN user name: the password is the namespace's connection string.
pub const EVENT_HUBS_USER: &str = "$ConnectionString";
/// A connection string in Event Hubs' form, as the PLAIN password of [`EVENT_HUBS_USER`].
pub const EVENT_HUBS_PASSWORD: &str = "Endpoint=sb://kafka-dlq-test.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=c2VjcmV0LWtleQ=";
/// The password of the client's private key (mutual TLS).
pub const CLIENT_KEY_PASSWORD: &str = "client-key-pass";
/// The OIDC client of the token endpoint.
pub const OIDC_CLIENT_ID: &str = "kafka-dlq-service";
/// Its secret.
pub const OIDC_CLIENT_SECRET: &str = "oidc-client-s3cret";
/// The scope the token endpoint expects.
pub const OIDC_SCOPE: &str = "kafka";
/// An OIDC client (with [`OIDC_CLIENT_SECRET`]) whose tokens expired a minute before they
/// were issued.
pub const OIDC_EXPIRED_CLIENT_ID: &str = "kafka-dlq-expired";
/// An OIDC client (with [`OIDC_CLIENT_SECRET`]) whose tokens live 5 minutes, as a real
/// provider's do: krafka refuses a token with less than 30 s to live.
pub const OIDC_LONG_CLIENT_ID: &str = "kafka-dlq-long";

/// The AWS access key id the MSK IAM listener takes (with [`AWS_SECRET_ACCESS_KEY`]).
pub const AWS_ACCESS_KEY_ID: &str = "AKIAKAFKADLQTEST0001";
/// Its secret access key.
pub const AWS_SECRET_ACCESS_KEY: &str = "kafka-dlq/test+Secret/Access0Key";

/// Every secret above: no output of a test run may contain one.
pub const SECRETS: [&str; 6] = [
    PASSWORD,
    SCRAM_PASSWORD,
    AWS_SECRET_ACCESS_KEY,
    EVENT_HUBS_PASSWORD,
    CLIENT_KEY_PASSWORD,
    OIDC_CLIENT_SECRET,
];

/// The flags of SCRAM-SHA-512 over TLS as [`USER`], trusting `ca`; the password goes apart.
pub fn scram_flags(ca: &str) -> [&str; 8] {
    [
        "--security-protocol",
        "SASL_SSL",
        "--sasl-mechanism",
        "SCRAM-SHA-512",
        "--sasl-username",
        USER,
        "--ssl-ca-location",
        ca,
    ]
}

/// The flags of Amazon MSK IAM in eu-west-1 over TLS, trusting `ca`; the credentials go apart.
pub fn msk_iam_flags(ca: &str) -> [&str; 8] {
    [
        "--security-protocol",
        "SASL_SSL",
        "--sasl-mechanism",
        "AWS_MSK_IAM",
        "--aws-region",
        "eu-west-1",
        "--ssl-ca-location",
        ca,
    ]
}

/// The listeners of a secured broker, each a way managed clusters are reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Listener {
    /// TLS, the server's certificate signed by the test CA for `127.0.0.1` and `localhost`.
    Ssl,
    /// TLS with a client certificate required (mutual TLS), signed by the test CA.
    Mtls,
    /// SASL over TLS: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.
    SaslSsl,
    /// SASL/OAUTHBEARER over TLS, tokens validated against the [`Oidc`] endpoint's JWKS.
    Oauth,
    /// TLS with a certificate for another host name (`kafka.invalid`).
    WrongHost,
    /// TLS with a certificate that expired in 2020.
    Expired,
    /// SASL/OAUTHBEARER over TLS with Amazon MSK IAM tokens, checked by
    /// `tests/kafka/MskIamTokenValidator.java` against [`AWS_SECRET_ACCESS_KEY`].
    MskIam,
}

impl Listener {
    /// Every listener.
    pub const ALL: [Listener; 7] = [
        Listener::Ssl,
        Listener::Mtls,
        Listener::SaslSsl,
        Listener::Oauth,
        Listener::WrongHost,
        Listener::Expired,
        Listener::MskIam,
    ];

    /// Its name in the broker's configuration.
    pub fn name(self) -> &'static str {
        match self {
            Listener::Ssl => "SSL",
            Listener::Mtls => "MTLS",
            Listener::SaslSsl => "SASL_SSL",
            Listener::Oauth => "OAUTH",
            Listener::WrongHost => "WRONGHOST",
            Listener::Expired => "EXPIRED",
            Listener::MskIam => "MSKIAM",
        }
    }

    /// Its security protocol.
    pub fn protocol(self) -> &'static str {
        match self {
            Listener::SaslSsl | Listener::Oauth | Listener::MskIam => "SASL_SSL",
            _ => "SSL",
        }
    }
}

/// The binary's CA and token endpoint, made on first use (tokens live 12 s).
pub struct Fixture {
    /// The CA and what it signed.
    pub pki: Pki,
    /// The token endpoint.
    pub oidc: &'static Oidc,
}

/// How long the token endpoint's tokens live: short, so that a run outlives several.
pub const TOKEN_LIFETIME_S: u64 = 12;

/// The binary's [`Fixture`].
pub fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("kafka-dlq-pki-{}", std::process::id()));
        let pki = Pki::create(&dir).unwrap_or_else(|e| panic!("{e}"));
        let oidc = Oidc::shared(&pki, TOKEN_LIFETIME_S);
        Fixture { pki, oidc }
    })
}

/// A Kafka node (of the share-group version when `share`) with a listener of each
/// [`Listener`] kind beside the plaintext one: certificates of `pki`, SCRAM users added at
/// format time, PLAIN users in the JAAS configuration, OAUTHBEARER tokens validated against
/// `oidc`'s JWKS. Its listeners' addresses: [`Kafka::listener`] with [`Listener::name`].
pub fn start_secured(pki: &Pki, oidc: &Oidc, share: bool) -> Result<Kafka, String> {
    let listeners: Vec<Extra> = Listener::ALL
        .iter()
        .map(|l| Extra {
            name: l.name(),
            protocol: l.protocol(),
        })
        .collect();
    // Kafka 4 fetches only the OAuth URLs it is told it may; the MSK IAM check is a class of
    // the test's own.
    let jvm = vec![
        format!(
            "-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={}",
            oidc.jwks_endpoint()
        ),
        "-cp".to_string(),
        msk_iam_validator(pki, share)?.display().to_string(),
    ];
    let mut format = Vec::new();
    for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
        format.push("--add-scram".to_string());
        format.push(format!(
            "{mechanism}=[name={USER},password={SCRAM_PASSWORD}]"
        ));
    }
    Kafka::start_with(share, &listeners, &broker_settings(pki, oidc), jvm, &format)
}

/// `tests/kafka/MskIamTokenValidator.java` compiled against Kafka's jars into a directory of
/// `pki`'s: the classes for the broker's class path.
fn msk_iam_validator(pki: &Pki, share: bool) -> Result<PathBuf, String> {
    let version = if share {
        super::broker::SHARE_KAFKA_VERSION
    } else {
        super::broker::KAFKA_VERSION
    };
    let classes = pki.path(&format!("classes-{version}"));
    let source =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/MskIamTokenValidator.java");
    let javac = std::env::var("JAVA_HOME")
        .map(|home| PathBuf::from(home).join("bin/javac"))
        .unwrap_or_else(|_| PathBuf::from("javac"));
    let out = Command::new(javac)
        .arg("-cp")
        .arg(format!(
            "{}/*",
            super::broker::kafka_libs_of(version).display()
        ))
        .arg("-d")
        .arg(&classes)
        .arg(&source)
        .output()
        .map_err(|e| format!("could not run javac ({e}); is a JDK 17 installed?"))?;
    if out.status.success() {
        Ok(classes)
    } else {
        Err(format!(
            "javac {}: {}",
            source.display(),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The broker settings of the secured listeners: the key stores and trust store (PEM), the
/// client certificate required on [`Listener::Mtls`], the SASL mechanisms and their users,
/// the JWKS that validates OAUTHBEARER tokens, and re-authentication of OAUTHBEARER
/// connections every 10 s (a client that does not refresh its token is cut off).
pub fn broker_settings(pki: &Pki, oidc: &Oidc) -> String {
    let file = |f: &str| pki.path(f).display().to_string();
    let jaas_plain = format!(
        "org.apache.kafka.common.security.plain.PlainLoginModule required user_{USER}=\"{PASSWORD}\" user_{EVENT_HUBS_USER}=\"{EVENT_HUBS_PASSWORD}\";"
    );
    let mut out = format!(
        "ssl.keystore.type=PEM
ssl.keystore.location={server}
ssl.truststore.type=PEM
ssl.truststore.location={ca}
listener.name.mtls.ssl.client.auth=required
listener.name.wronghost.ssl.keystore.type=PEM
listener.name.wronghost.ssl.keystore.location={wronghost}
listener.name.expired.ssl.keystore.type=PEM
listener.name.expired.ssl.keystore.location={expired}
listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER
listener.name.oauth.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.oauth.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
sasl.oauthbearer.jwks.endpoint.url={jwks}
sasl.oauthbearer.expected.audience=kafka
sasl.oauthbearer.expected.issuer=kafka-dlq-test-idp
listener.name.oauth.oauthbearer.connections.max.reauth.ms=10000
listener.name.mskiam.sasl.enabled.mechanisms=OAUTHBEARER
listener.name.mskiam.oauthbearer.sasl.server.callback.handler.class=kafkadlq.test.MskIamTokenValidator
listener.name.mskiam.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"broker\" accessKeyId=\"{AWS_ACCESS_KEY_ID}\" secretAccessKey=\"{AWS_SECRET_ACCESS_KEY}\";
",
        server = file("server.pem"),
        ca = file("ca.pem"),
        wronghost = file("wronghost.pem"),
        expired = file("expired.pem"),
        jwks = oidc.jwks_endpoint(),
    );
    // A .properties value: `\` escapes, and the JAAS text has none of `:`/`=` that matter.
    out.push_str(&format!(
        "listener.name.sasl_ssl.plain.sasl.jaas.config={}\n",
        jaas_plain.replace('\\', "\\\\")
    ));
    out
}

/// A private CA and what it signed, in a directory of their own.
#[derive(Debug, Clone)]
pub struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// Makes a CA, the server certificates (good, wrong host, expired), a client certificate
    /// with an encrypted key, a second CA nobody trusts, and the token signing key.
    pub fn create(dir: &Path) -> Result<Pki, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let pki = Pki {
            dir: dir.to_path_buf(),
        };
        pki.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "30",
            "-subj",
            "/CN=kafka-dlq test CA",
        ])?;
        pki.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "other-ca.key",
            "-out",
            "other-ca.pem",
            "-days",
            "30",
            "-subj",
            "/CN=another CA",
        ])?;
        pki.server("server", "IP:127.0.0.1,DNS:localhost", None)?;
        pki.server("wronghost", "DNS:kafka.invalid", None)?;
        pki.server(
            "expired",
            "IP:127.0.0.1,DNS:localhost",
            Some(("20200101000000Z", "20200102000000Z")),
        )?;
        // The client's key is encrypted (PKCS#8, AES-256) with CLIENT_KEY_PASSWORD.
        pki.openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-keyout",
            "client.key",
            "-passout",
            &format!("pass:{CLIENT_KEY_PASSWORD}"),
            "-out",
            "client.csr",
            "-subj",
            "/CN=kafka-dlq-client",
        ])?;
        // A version 3 certificate (an extension makes it one): rustls, which the sidecar's
        // HTTPS client uses, refuses version 1.
        let client_ext = pki.dir.join("client.ext");
        std::fs::write(&client_ext, "extendedKeyUsage=clientAuth\n").map_err(|e| e.to_string())?;
        pki.openssl(&[
            "x509",
            "-req",
            "-in",
            "client.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "client.pem",
            "-days",
            "30",
            "-extfile",
            &client_ext.display().to_string(),
        ])?;
        pki.openssl(&[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-outform",
            "DER",
            "-out",
            "jwt.der", // PKCS#1 for an RSA key: what ring's RsaKeyPair::from_der reads
        ])?;
        Ok(pki)
    }

    /// A server certificate `name.pem` (its key first, then the certificate and the CA: what
    /// Kafka's PEM key store reads) for `san`, valid 30 days or for `dates`.
    fn server(&self, name: &str, san: &str, dates: Option<(&str, &str)>) -> Result<(), String> {
        let (key, csr, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        self.openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            "/CN=localhost",
        ])?;
        let ext = self.dir.join(format!("{name}.ext"));
        std::fs::write(&ext, format!("subjectAltName={san}\n")).map_err(|e| e.to_string())?;
        match dates {
            None => self.openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "30",
                "-extfile",
                &ext.display().to_string(),
            ])?,
            Some((start, end)) => {
                // `openssl ca` is the one that takes a start date in the past.
                let db = self.dir.join(format!("{name}-ca"));
                std::fs::create_dir_all(&db).map_err(|e| e.to_string())?;
                std::fs::write(db.join("index.txt"), "").map_err(|e| e.to_string())?;
                std::fs::write(db.join("serial"), "1000\n").map_err(|e| e.to_string())?;
                let conf = db.join("ca.cnf");
                std::fs::write(
                    &conf,
                    format!(
                        "[ca]\ndefault_ca = test\n[test]\ndatabase = {db}/index.txt\n\
                         new_certs_dir = {db}\nserial = {db}/serial\ndefault_md = sha256\n\
                         policy = any\n[any]\ncommonName = supplied\n",
                        db = db.display()
                    ),
                )
                .map_err(|e| e.to_string())?;
                self.openssl(&[
                    "ca",
                    "-batch",
                    "-notext",
                    "-config",
                    &conf.display().to_string(),
                    "-cert",
                    "ca.pem",
                    "-keyfile",
                    "ca.key",
                    "-in",
                    &csr,
                    "-out",
                    &crt,
                    "-startdate",
                    start,
                    "-enddate",
                    end,
                    "-extfile",
                    &ext.display().to_string(),
                ])?
            }
        }
        let read = |f: &str| std::fs::read_to_string(self.dir.join(f)).map_err(|e| e.to_string());
        let pem = format!("{}{}{}", read(&key)?, read(&crt)?, read("ca.pem")?);
        std::fs::write(self.dir.join(format!("{name}.pem")), pem).map_err(|e| e.to_string())
    }

    fn openssl(&self, args: &[&str]) -> Result<(), String> {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .output()
            .map_err(|e| format!("could not run openssl ({e}); ./scripts/test.sh installs it"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "openssl {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// A file of this PKI.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// The CA that signed the brokers' and the client's certificates.
    pub fn ca(&self) -> String {
        self.path("ca.pem").display().to_string()
    }

    /// A CA that signed nothing of this broker's.
    pub fn other_ca(&self) -> String {
        self.path("other-ca.pem").display().to_string()
    }

    /// The client's certificate (mutual TLS).
    pub fn client_certificate(&self) -> String {
        self.path("client.pem").display().to_string()
    }

    /// The client's key, encrypted with [`CLIENT_KEY_PASSWORD`].
    pub fn client_key(&self) -> String {
        self.path("client.key").display().to_string()
    }
}

/// An OpenID Connect token endpoint on loopback, over TLS (its certificate signed by the
/// test CA; kafka-dlq refuses a token endpoint in plain HTTP): `POST /token` (client
/// credentials grant, the client authenticated with HTTP Basic or in the form) answers an
/// RS256 JWT for [`OIDC_CLIENT_ID`] with audience `kafka`. The key that verifies it is in a
/// JWKS file the broker reads ([`Oidc::jwks_endpoint`]). It runs on a thread of its own for
/// the test binary's life.
pub struct Oidc {
    /// `https://localhost:<port>`.
    pub url: String,
    jwks: PathBuf,
    issued: Arc<AtomicUsize>,
    lifetime_s: u64,
}

impl Oidc {
    /// The binary's token endpoint, started on first use; its tokens live `lifetime_s`.
    pub fn shared(pki: &Pki, lifetime_s: u64) -> &'static Oidc {
        static OIDC: OnceLock<Oidc> = OnceLock::new();
        OIDC.get_or_init(|| Oidc::start(pki, lifetime_s))
    }

    fn start(pki: &Pki, lifetime_s: u64) -> Oidc {
        let der = std::fs::read(pki.path("jwt.der")).expect("the JWT signing key");
        let key = Arc::new(ring::signature::RsaKeyPair::from_der(&der).expect("an RSA key"));
        let public: ring::rsa::PublicKeyComponents<Vec<u8>> = key.public().into();
        let unsigned =
            |bytes: &[u8]| -> Vec<u8> { bytes.iter().copied().skip_while(|b| *b == 0).collect() };
        let jwks = pki.path("jwks.json");
        std::fs::write(
            &jwks,
            serde_json::json!({"keys": [{
                "kty": "RSA", "kid": "kafka-dlq-test", "use": "sig", "alg": "RS256",
                "n": b64(&unsigned(&public.n)),
                "e": b64(&unsigned(&public.e)),
            }]})
            .to_string(),
        )
        .unwrap();
        let issued = Arc::new(AtomicUsize::new(0));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!(
            "https://localhost:{}",
            listener.local_addr().unwrap().port()
        );
        let state = Endpoint {
            key,
            issued: issued.clone(),
            lifetime_s,
        };
        let tls = tls_acceptor(pki);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let app = axum::Router::new()
                    .route("/token", axum::routing::post(token))
                    .with_state(state);
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let (tls, app) = (tls.clone(), app.clone());
                    tokio::spawn(async move {
                        let Ok(stream) = tls.accept(tcp).await else {
                            return;
                        };
                        let service = hyper_util::service::TowerToHyperService::new(app);
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
        });
        Oidc {
            url,
            jwks,
            issued,
            lifetime_s,
        }
    }

    /// The token endpoint.
    pub fn token_endpoint(&self) -> String {
        format!("{}/token", self.url)
    }

    /// The JWKS the broker validates tokens with, a `file:` URL.
    pub fn jwks_endpoint(&self) -> String {
        format!("file://{}", self.jwks.display())
    }

    /// Tokens issued so far (to [`OIDC_CLIENT_ID`]).
    pub fn issued(&self) -> usize {
        self.issued.load(Ordering::SeqCst)
    }

    /// How long its tokens live.
    pub fn lifetime(&self) -> Duration {
        Duration::from_secs(self.lifetime_s)
    }
}

/// A TLS acceptor with the test CA's server certificate (for `localhost` and `127.0.0.1`).
fn tls_acceptor(pki: &Pki) -> tokio_rustls::TlsAcceptor {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(pki.path("server.crt"))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(pki.path("server.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

#[derive(Clone)]
struct Endpoint {
    key: Arc<ring::signature::RsaKeyPair>,
    issued: Arc<AtomicUsize>,
    lifetime_s: u64,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

async fn token(
    axum::extract::State(endpoint): axum::extract::State<Endpoint>,
    headers: axum::http::HeaderMap,
    body: String,
) -> (
    axum::http::StatusCode,
    [(axum::http::HeaderName, &'static str); 1],
    String,
) {
    let form: std::collections::HashMap<String, String> = body
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (decode_form(k), decode_form(v)))
        .collect();
    let basic = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
        .and_then(|v| String::from_utf8(v).ok())
        .and_then(|v| {
            v.split_once(':')
                .map(|(id, secret)| (decode_form(id), decode_form(secret)))
        });
    let (id, secret) = basic.unwrap_or_else(|| {
        (
            form.get("client_id").cloned().unwrap_or_default(),
            form.get("client_secret").cloned().unwrap_or_default(),
        )
    });
    let json = [(axum::http::header::CONTENT_TYPE, "application/json")];
    let refused = |error: &str| {
        (
            axum::http::StatusCode::UNAUTHORIZED,
            json.clone(),
            serde_json::json!({ "error": error }).to_string(),
        )
    };
    if form.get("grant_type").map(String::as_str) != Some("client_credentials") {
        return refused("unsupported_grant_type");
    }
    let expired = id == OIDC_EXPIRED_CLIENT_ID;
    let long = id == OIDC_LONG_CLIENT_ID;
    if !(id == OIDC_CLIENT_ID || expired || long) || secret != OIDC_CLIENT_SECRET {
        return refused("invalid_client");
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (iat, exp) = if expired {
        (now - 3_600, now - 60)
    } else if long {
        (now, now + 300)
    } else {
        (now, now + endpoint.lifetime_s)
    };
    let header = b64(br#"{"alg":"RS256","typ":"JWT","kid":"kafka-dlq-test"}"#);
    let claims = b64(serde_json::json!({
        "iss": "kafka-dlq-test-idp", "sub": id, "aud": "kafka",
        "scope": form.get("scope").cloned().unwrap_or_default(),
        "iat": iat, "exp": exp,
    })
    .to_string()
    .as_bytes());
    let signed = format!("{header}.{claims}");
    let mut signature = vec![0; endpoint.key.public().modulus_len()];
    endpoint
        .key
        .sign(
            &ring::signature::RSA_PKCS1_SHA256,
            &ring::rand::SystemRandom::new(),
            signed.as_bytes(),
            &mut signature,
        )
        .unwrap();
    if id == OIDC_CLIENT_ID {
        endpoint.issued.fetch_add(1, Ordering::SeqCst);
    }
    (
        axum::http::StatusCode::OK,
        json,
        serde_json::json!({
            "access_token": format!("{signed}.{}", b64(&signature)),
            "token_type": "bearer",
            "expires_in": exp.saturating_sub(now),
        })
        .to_string(),
    )
}

/// `application/x-www-form-urlencoded` decoding: `+` is a space, `%XX` a byte.
fn decode_form(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).to_string()
}
