//! `kafka-dlq dlq list | show | replay | discard | history | seal | parked`: look into a
//! dead-letter topic, send records back or discard them, and see what kafka-dlq keeps.

use std::io::{IsTerminal, Write};

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use kafka_dlq::dlq_reader::{DlqEntry, DlqReader, ErrorText, Filter};
use kafka_dlq::replay::{replay, Destination, ReplayOptions};
use kafka_dlq::state::ledger::Resolution;
use kafka_dlq::{ConfigError, DeadLetterKind};

use super::CliError;

mod decoded;
mod discard;
mod history;
mod parked;
mod seal;
pub(super) mod view;
pub(super) use discard::DiscardArgs;
pub(super) use history::HistoryArgs;
pub(super) use parked::ParkedArgs;
pub(super) use seal::SealArgs;
use view::entry_json;
pub(super) use view::{print_history, print_table};

/// `kafka-dlq dlq …`
#[derive(Debug, Subcommand)]
pub(super) enum DlqCommand {
    /// List dead letters: a table, or one JSON object per line with --json.
    List(ListArgs),
    /// Show one dead letter in full.
    Show(ShowArgs),
    /// Send dead letters back to their source topic (or --to), resumably.
    Replay(ReplayArgs),
    /// Discard outstanding dead letters with a reason: they need no redrive. Releases the
    /// keys parked behind them (key_order_after_failure = park), in order.
    Discard(DiscardArgs),
    /// List the replay runs on the audit topic: who, when, from where, what, how it ended.
    History(HistoryArgs),
    /// Seal the state written before `--audit-key` was set, so that the tools, which ignore
    /// unsealed state once the key is set, keep what it says.
    Seal(SealArgs),
    /// List the keys a consumer group keeps parked behind a record that left
    /// (key_order_after_failure = park): their heads and the records waiting.
    Parked(ParkedArgs),
}

impl DlqCommand {
    /// The cluster the tool reads: its brokers, client options and dead-letter topic (none
    /// for `history`, which reads the audit topic).
    pub(super) fn cluster(
        &self,
    ) -> Result<(String, kafka_dlq::kafka::ClientOptions, Option<String>), ConfigError> {
        let (cluster, topic) = match self {
            DlqCommand::List(a) => (&a.source.cluster, Some(a.source.dlq_topic.clone())),
            DlqCommand::Show(a) => (&a.source.cluster, Some(a.source.dlq_topic.clone())),
            DlqCommand::Replay(a) => (&a.source.cluster, Some(a.source.dlq_topic.clone())),
            DlqCommand::Discard(a) => (&a.source.cluster, Some(a.source.dlq_topic.clone())),
            DlqCommand::History(a) => (a.cluster(), None),
            DlqCommand::Seal(a) => (a.cluster(), None),
            DlqCommand::Parked(a) => (a.cluster(), Some(a.park_topic())),
        };
        Ok((cluster.brokers()?, cluster.librdkafka()?, topic))
    }

    /// Where the command keeps kafka-dlq's state; `None` for `parked`, which reads the park
    /// log alone.
    pub(super) fn state(&self) -> Result<Option<kafka_dlq::state::StateTopics>, ConfigError> {
        match self {
            DlqCommand::List(a) => a.source.state.topics().map(Some),
            DlqCommand::Show(a) => a.source.state.topics().map(Some),
            DlqCommand::Replay(a) => a.source.state.topics().map(Some),
            DlqCommand::Discard(a) => a.source.state.topics().map(Some),
            DlqCommand::History(a) => a.state().topics().map(Some),
            DlqCommand::Seal(a) => a.state().topics().map(Some),
            DlqCommand::Parked(_) => Ok(None),
        }
    }

    /// The connection settings of the command.
    pub(super) fn connection_mut(&mut self) -> &mut super::connection::ConnectionArgs {
        match self {
            DlqCommand::List(a) => a.source.cluster.connection_mut(),
            DlqCommand::Show(a) => a.source.cluster.connection_mut(),
            DlqCommand::Replay(a) => a.source.cluster.connection_mut(),
            DlqCommand::Discard(a) => a.source.cluster.connection_mut(),
            DlqCommand::History(a) => a.cluster_mut().connection_mut(),
            DlqCommand::Seal(a) => a.cluster_mut().connection_mut(),
            DlqCommand::Parked(a) => a.cluster_mut().connection_mut(),
        }
    }
}

/// The cluster the tools talk to.
#[derive(Debug, Args)]
pub(super) struct Cluster {
    /// Bootstrap servers, comma-separated host:port.
    #[arg(long, env = "KAFKA_BROKERS")]
    brokers: Option<String>,
    #[command(flatten)]
    connection: super::connection::ConnectionArgs,
}

impl Cluster {
    fn brokers(&self) -> Result<String, ConfigError> {
        self.brokers
            .clone()
            .filter(|b| !b.trim().is_empty())
            .ok_or_else(|| ConfigError::new("brokers", "", "is required"))
    }

    fn librdkafka(&self) -> Result<kafka_dlq::kafka::ClientOptions, ConfigError> {
        self.connection.client_options()
    }

    /// Its connection settings.
    pub(super) fn connection_mut(&mut self) -> &mut super::connection::ConnectionArgs {
        &mut self.connection
    }
}

/// Where the DLQ is.
#[derive(Debug, Args)]
pub(super) struct Source {
    #[command(flatten)]
    cluster: Cluster,
    /// The dead-letter topic.
    #[arg(long)]
    dlq_topic: String,
    /// The consumers' dead-letter topic template (their dlq_topic, `{topic}` standing for the
    /// source topic): a dead letter written as a reference is read back only from a source
    /// topic whose dead-letter topic this is.
    #[arg(long, env = "KAFKA_DLQ_TOPIC", default_value = "{topic}-dlt")]
    dlq_topic_template: String,
    /// Where replays and the console's actions are recorded and positions kept.
    #[command(flatten)]
    state: super::state::StateArgs,
}

impl Source {
    fn template(&self) -> Result<kafka_dlq::dlq::DlqTopic, ConfigError> {
        kafka_dlq::dlq::DlqTopic::new(&self.dlq_topic_template)
            .map_err(|r| ConfigError::new("dlq_topic_template", &self.dlq_topic_template, r))
    }

    fn brokers(&self) -> Result<String, ConfigError> {
        self.cluster.brokers()
    }

    fn librdkafka(&self) -> Result<kafka_dlq::kafka::ClientOptions, ConfigError> {
        self.cluster.librdkafka()
    }
}

/// Which dead letters.
#[derive(Debug, Args)]
pub(super) struct FilterArgs {
    /// Only dead letters from this source topic.
    #[arg(long)]
    source_topic: Option<String>,
    /// Only this error kind: permanent, retries_exhausted, deserialization or unclassified (a foreign dead
    /// letter that does not say).
    #[arg(long)]
    kind: Option<String>,
    /// Only dead letters written at or after this time (RFC 3339).
    #[arg(long)]
    since: Option<String>,
    /// Only dead letters written before this time (RFC 3339).
    #[arg(long)]
    until: Option<String>,
    /// Only the dead letter with this record id.
    #[arg(long)]
    id: Option<String>,
    /// Only dead letters of this consumer group: the service that gave up on them.
    #[arg(long)]
    group: Option<String>,
    /// Only dead letters from this source partition.
    #[arg(long)]
    source_partition: Option<i32>,
    /// Only dead letters from these source offsets: `FROM..TO` (TO excluded), `FROM..` or `..TO`.
    #[arg(long, value_name = "FROM..TO")]
    source_offsets: Option<String>,
    /// Only dead letters with this key (its text; a key that is not UTF-8 as its base64).
    #[arg(long)]
    key: Option<String>,
    /// Only dead letters whose error message contains this text.
    #[arg(long, conflicts_with = "error_matches")]
    error_contains: Option<String>,
    /// Only dead letters whose error message matches this regular expression.
    #[arg(long, value_name = "REGEX")]
    error_matches: Option<String>,
    /// Only dead letters of this cause: the error fingerprint the monitor's alerts and the
    /// console show (`<kind>: <message with ids and numbers as #>`).
    #[arg(long)]
    fingerprint: Option<String>,
    /// Only dead letters this filter expression (CEL) is true of, e.g.
    /// `payload.customer.id == 42 && error.contains('timeout')`; `decoded.…` with
    /// --schema-registry-url (docs/tools.md, "Filter expressions").
    #[arg(long = "where", id = "where", value_name = "EXPRESSION")]
    where_: Option<String>,
}

/// `FROM..TO`, `FROM..` or `..TO` as a range of offsets.
fn parse_offsets(text: &str) -> Result<std::ops::Range<i64>, ConfigError> {
    let bad = |why: &str| ConfigError::new("source_offsets", text, why);
    let (from, to) = text
        .split_once("..")
        .ok_or_else(|| bad("expected FROM..TO, FROM.. or ..TO"))?;
    let number = |n: &str, default: i64| {
        if n.trim().is_empty() {
            Ok(default)
        } else {
            n.trim()
                .parse::<i64>()
                .map_err(|e| bad(&format!("not an offset: {e}")))
        }
    };
    let range = number(from, 0)?..number(to, i64::MAX)?;
    if range.start >= range.end || range.start < 0 {
        return Err(bad("expected 0 <= FROM < TO"));
    }
    Ok(range)
}

fn parse_time(key: &str, value: &Option<String>) -> Result<Option<DateTime<Utc>>, ConfigError> {
    value
        .as_deref()
        .map(|v| {
            DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| {
                    ConfigError::new(
                        key,
                        v,
                        format!("expected RFC 3339, e.g. 2026-11-30T10:00:00Z ({e})"),
                    )
                })
        })
        .transpose()
}

impl FilterArgs {
    fn filter(&self) -> Result<Filter, ConfigError> {
        let kind = match self.kind.as_deref() {
            None => None,
            Some(name) => Some(DeadLetterKind::from_name(name).ok_or_else(|| {
                ConfigError::new(
                    "kind",
                    name,
                    "expected permanent, retries_exhausted, deserialization or unclassified",
                )
            })?),
        };
        Ok(Filter {
            source_topic: self.source_topic.clone(),
            kind,
            since: parse_time("since", &self.since)?,
            until: parse_time("until", &self.until)?,
            id: self.id.clone(),
            group: self.group.clone(),
            source_partition: self.source_partition,
            source_offsets: self
                .source_offsets
                .as_deref()
                .map(parse_offsets)
                .transpose()?,
            key: self.key.clone(),
            error: match (&self.error_contains, &self.error_matches) {
                (Some(text), _) => Some(ErrorText::Contains(text.clone())),
                (None, Some(pattern)) => Some(ErrorText::regex(pattern).map_err(|e| {
                    ConfigError::new(
                        "error_matches",
                        pattern,
                        format!("not a regular expression: {e}"),
                    )
                })?),
                (None, None) => None,
            },
            fingerprint: self.fingerprint.clone(),
            dlq_records: None,
            where_: self
                .where_
                .as_deref()
                .map(|text| {
                    kafka_dlq::dlq_reader::Expression::compile(text)
                        .map_err(|e| ConfigError::new("where", text, e))
                })
                .transpose()?,
            within: None,
            before: None,
        })
    }
}

/// Flags of `dlq list`.
#[derive(Debug, Args)]
pub(super) struct ListArgs {
    #[command(flatten)]
    source: Source,
    #[command(flatten)]
    filter: FilterArgs,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Show at most this many.
    #[arg(long)]
    limit: Option<usize>,
    /// Every dead letter the topic holds, each with what resolved it (replayed, redriven,
    /// discarded), instead of the outstanding ones only.
    #[arg(long)]
    all: bool,
    /// A schema registry: Avro, Protobuf and JSON Schema payloads are shown decoded
    /// (`decoded` in the JSON; docs/schemas.md).
    #[command(flatten)]
    registry: super::schema_registry::RegistryArgs,
}

/// Flags of `dlq show`.
#[derive(Debug, Args)]
pub(super) struct ShowArgs {
    #[command(flatten)]
    source: Source,
    /// The record id (or `<dlq topic>-<partition>-<offset>` for a record that is not an envelope).
    id: String,
    /// Only the dead letter of this consumer group (when several services dead-lettered
    /// records with that id into one DLT).
    #[arg(long)]
    group: Option<String>,
    /// A schema registry: an Avro, Protobuf or JSON Schema payload is shown decoded
    /// (`decoded`; docs/schemas.md).
    #[command(flatten)]
    registry: super::schema_registry::RegistryArgs,
}

/// Flags of `dlq replay`.
#[derive(Debug, Args)]
pub(super) struct ReplayArgs {
    #[command(flatten)]
    source: Source,
    #[command(flatten)]
    filter: FilterArgs,
    /// Send everything to this topic instead of each dead letter's group.
    #[arg(long, conflicts_with = "to_source")]
    to: Option<String>,
    /// Send each dead letter back to its source topic, where every consumer group reading it
    /// handles it again (they are named before the first send), instead of to the redrive
    /// topic of the group that dead-lettered it (`<source>-redrive-<group>`, the default).
    #[arg(long)]
    to_source: bool,
    /// Show what would be sent; send and commit nothing.
    #[arg(long)]
    dry_run: bool,
    /// At most this many records per second.
    #[arg(long)]
    rate: Option<u32>,
    /// Refuse records already replayed this many times.
    #[arg(long, default_value_t = 3)]
    max_replays: u32,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Who runs the replay, for the audit: in each record's `kafka_dlq-replayed-by` and the
    /// run's summary (default: the login name).
    #[arg(long, env = "KAFKA_DLQ_OPERATOR")]
    operator: Option<String>,
}

/// Runs a `dlq` subcommand.
pub(super) async fn run(command: DlqCommand) -> Result<(), CliError> {
    let (brokers, options, _) = command.cluster()?;
    super::connection::admitted(&brokers, &options).await?;
    match command {
        DlqCommand::List(args) => list(args).await,
        DlqCommand::Show(args) => show(args).await,
        DlqCommand::Replay(args) => replay_command(args).await,
        DlqCommand::Discard(args) => discard::run(args).await,
        DlqCommand::History(args) => history::run(args).await,
        DlqCommand::Seal(args) => seal::run(args).await,
        DlqCommand::Parked(args) => parked::run(args).await,
    }
}

/// Which dead letters a listing shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum View {
    /// Those outstanding: what the monitor counts and the console's inbox shows.
    Outstanding,
    /// Every one the topic holds.
    All,
}

/// What [`read`] read.
struct Read {
    /// The entries handed on.
    matched: usize,
    /// Where each partition of the DLQ topic ended when it was opened: nothing after is read.
    ends: std::collections::HashMap<i32, i64>,
}

/// Reads the DLQ topic (from its first outstanding offsets, or with [`View::All`] from its
/// log start) and hands each entry that `filter` matches and `view` shows to `each`, with what
/// resolved it, as it is read (nothing is collected), up to `limit` of them.
async fn read(
    source: &Source,
    filter: &Filter,
    view: View,
    limit: Option<usize>,
    codec: Option<&kafka_dlq::schema::Codec>,
    mut each: impl FnMut(&DlqEntry, Option<&Resolution>, Option<&serde_json::Value>),
) -> Result<Read, CliError> {
    if let (Some(w), None) = (&filter.where_, codec) {
        if w.reads_decoded() {
            return Err(ConfigError::new(
                "where",
                w.source(),
                "reads `decoded`, which needs --schema-registry-url",
            )
            .into());
        }
    }
    let (brokers, raw, topic, template) = (
        source.brokers()?,
        source.librdkafka()?,
        source.dlq_topic.clone(),
        source.template()?,
    );
    let state = source.state.topics()?;
    let mut reader = tokio::task::spawn_blocking({
        let (brokers, raw, topic) = (brokers.clone(), raw.clone(), topic.clone());
        move || DlqReader::open(&brokers, &raw, &topic).map(|r| r.with_template(template))
    })
    .await
    .expect("reader task")
    .map_err(|e| unreadable(&source.dlq_topic, e))?;
    let ends = reader.ends();
    let ledger = ledger_of(&brokers, &raw, &state, &topic, &ends).await?;
    if view == View::Outstanding {
        let ranges = reader
            .ends()
            .keys()
            .map(|p| (*p, ledger.first_outstanding(*p)..i64::MAX))
            .collect();
        reader
            .narrow(&ranges)
            .map_err(|e| unreadable(&source.dlq_topic, e))?;
    }
    for open in reader.open_transactions() {
        eprintln!("note: `{}` {open}", source.dlq_topic);
    }
    let reads_decoded = filter.reads_decoded();
    let mut matched = 0;
    while let Some(entry) = reader.next_entry().await {
        let entry = entry
            .context("reading the dead-letter topic")
            .map_err(CliError::Runtime)?;
        let resolution = ledger.resolution(&entry);
        if view == View::Outstanding && resolution.is_some() {
            continue;
        }
        // Decoding asks the registry: only for dead letters the filter may keep. A `where`
        // that reads `decoded` can only say once it is there.
        if !reads_decoded && !filter.matches(&entry) {
            continue;
        }
        let decoded = match (codec, entry.content.envelope()) {
            (Some(codec), Some(envelope)) => decoded::decode(codec, envelope).await,
            _ => None,
        };
        let json = decoded.as_ref().and_then(|d| d.get("json"));
        if !reads_decoded || filter.matches_decoded(&entry, json) {
            each(&entry, resolution.as_ref(), decoded.as_ref());
            matched += 1;
            if limit.is_some_and(|l| matched >= l) {
                break;
            }
        }
    }
    Ok(Read { matched, ends })
}

/// The ledger of `dlq_topic` (whose partitions end at `ends`): the audit and every replay
/// group's position, an older position moved to the positions topic when it can be (read
/// all the same when it cannot: a principal that may not write there).
async fn ledger_of(
    brokers: &str,
    raw: &kafka_dlq::kafka::ClientOptions,
    state: &kafka_dlq::state::StateTopics,
    dlq_topic: &str,
    ends: &std::collections::HashMap<i32, i64>,
) -> Result<kafka_dlq::state::ledger::Ledger, CliError> {
    use kafka_dlq::state::ledger::Ledger;
    let mut client = rdkafka::ClientConfig::new();
    client.set("bootstrap.servers", brokers);
    raw.apply(&mut client);
    kafka_dlq::state::topics::warn(&client, brokers, state).await;
    let audit = {
        let (brokers, raw, kept, dlq) = (
            brokers.to_string(),
            raw.clone(),
            state.clone(),
            dlq_topic.to_string(),
        );
        tokio::task::spawn_blocking(move || {
            kafka_dlq::state::audit::history(&brokers, &raw, &kept, Some(&dlq))
        })
        .await
        .expect("audit task")
        .with_context(|| format!("cannot read the audit topic `{}`", state.audit))
        .map_err(CliError::Runtime)?
    };
    let mut store = kafka_dlq::state::PositionStore::new(brokers, raw, state);
    store
        .catch_up()
        .await
        .context("cannot read the replay positions")
        .map_err(CliError::Runtime)?;
    for group in Ledger::groups(dlq_topic, &audit.runs) {
        if let Err(e) = store.migrate(dlq_topic, &group, &audit.runs).await {
            eprintln!("warning: {e}");
        }
    }
    let unverified = audit.unverified + store.unverified();
    if unverified > 0 {
        eprintln!(
            "warning: {unverified} record(s) of the audit and positions topics were passed over: not sealed with the audit key"
        );
    }
    Ok(Ledger::new(dlq_topic, ends, &audit.runs, store.table()))
}

/// The error for a DLQ topic that cannot be opened: one line naming a topic that does not
/// exist.
fn unreadable(topic: &str, e: rdkafka::error::KafkaError) -> CliError {
    if kafka_dlq::dlq_reader::is_unknown_topic(&e) {
        CliError::Runtime(anyhow::anyhow!(
            "the dead-letter topic `{topic}` does not exist"
        ))
    } else {
        CliError::Runtime(anyhow::anyhow!(
            "cannot read dead-letter topic `{topic}`: {e}"
        ))
    }
}

async fn list(args: ListArgs) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    let filter = args.filter.filter()?;
    let shown = match args.all {
        true => View::All,
        false => View::Outstanding,
    };
    let codec = args.registry.codec()?;
    let codec = codec.as_deref();
    if args.json {
        read(
            &args.source,
            &filter,
            shown,
            args.limit,
            codec,
            |e, resolution, decoded| {
                let _ = writeln!(out, "{}", entry_json(e, resolution, decoded));
            },
        )
        .await?;
        return Ok(());
    }
    view::print_header(&mut out, shown == View::All);
    let count = read(
        &args.source,
        &filter,
        shown,
        args.limit,
        codec,
        |e, resolution, _| {
            let state = (shown == View::All).then(|| view::state_word(resolution));
            view::print_row(e, state, &mut out);
        },
    )
    .await?;
    view::print_count(count.matched, shown == View::All, &mut out);
    Ok(())
}

async fn show(args: ShowArgs) -> Result<(), CliError> {
    let filter = Filter {
        id: Some(args.id.clone()),
        group: args.group.clone(),
        ..Filter::default()
    };
    let mut out = std::io::stdout().lock();
    let codec = args.registry.codec()?;
    let found = read(
        &args.source,
        &filter,
        View::All,
        None,
        codec.as_deref(),
        |e, resolution, decoded| {
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&entry_json(e, resolution, decoded)).expect("JSON")
            );
        },
    )
    .await?;
    if found.matched == 0 {
        return Err(CliError::Runtime(anyhow::anyhow!(
            "no dead letter with id `{}` on `{}`",
            view::escaped(&args.id),
            args.source.dlq_topic
        )));
    }
    Ok(())
}

async fn replay_command(args: ReplayArgs) -> Result<(), CliError> {
    if let Some(to) = &args.to {
        kafka_dlq::dlq::check_topic_name(to).map_err(|r| ConfigError::new("to", to, r))?;
    }
    let filter = args.filter.filter()?;
    if let Some(w) = filter.where_.as_ref().filter(|w| w.reads_decoded()) {
        return Err(ConfigError::new(
            "where",
            w.source(),
            "a replay decodes nothing, so `decoded` would be null: select with `dlq list \
             --schema-registry-url … --where …` and replay by --id",
        )
        .into());
    }
    let options = ReplayOptions {
        librdkafka: args.source.librdkafka()?,
        dlq_template: args.source.template()?,
        destination: match (&args.to, args.to_source) {
            (Some(topic), _) => Destination::Topic(topic.clone()),
            (None, true) => Destination::Source,
            (None, false) => Destination::Group,
        },
        filter,
        dry_run: args.dry_run,
        rate_per_sec: args.rate,
        max_replays: args.max_replays,
        state: args.source.state.topics()?,
        ..ReplayOptions::new(&args.source.brokers()?, &args.source.dlq_topic)
    };
    let options = ReplayOptions {
        operator: args
            .operator
            .clone()
            .unwrap_or_else(|| options.operator.clone()),
        ..options
    };
    let begun = std::time::Instant::now();
    let cancel = tokio_util::sync::CancellationToken::new();
    let stopper = {
        let (cancel, signal) = (cancel.clone(), super::shutdown_signal());
        tokio::spawn(async move {
            signal.await;
            cancel.cancel();
        })
    };
    let tty = std::io::stderr().is_terminal();
    let mut last_draw = std::time::Instant::now();
    let verb = if args.dry_run {
        "would replay"
    } else {
        "replayed"
    };
    let json = args.json;
    let max_replays = args.max_replays;
    let report = {
        let mut out = std::io::stdout().lock();
        replay(
            &options,
            |done, total, outcome| {
                if !json {
                    if let Some(line) = view::outcome_line(outcome, verb, max_replays) {
                        if tty {
                            eprint!("\r\x1b[K");
                        }
                        let _ = writeln!(out, "{line}");
                    }
                }
                if tty && (last_draw.elapsed().as_millis() >= 200 || done == total) {
                    last_draw = std::time::Instant::now();
                    eprint!("\r{}", view::progress_line(done, total, begun.elapsed()));
                }
            },
            &cancel,
        )
        .await
    };
    stopper.abort();
    if tty {
        eprintln!();
    }
    let report = report.map_err(|e| match e {
        kafka_dlq::replay::ReplayError::Read { topic, source } => unreadable(&topic, source),
        e => CliError::Runtime(e.into()),
    })?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&report).expect("JSON")
        );
    } else {
        let _ = writeln!(
            out,
            "{verb} {} of {} scanned; filtered out {}, already resolved {}, refused {}, not envelopes {}, undecodable {}, lost {}, destination refused {}{}",
            report.replayed,
            report.scanned,
            report.filtered_out,
            report.already_resolved,
            report.refused,
            report.not_envelopes,
            report.undecodable,
            report.lost,
            report.not_here,
            if report.interrupted {
                "; interrupted: run the same command again to resume"
            } else {
                ""
            }
        );
        if let Some(run) = &report.run {
            let _ = writeln!(
                out,
                "run {run} on the audit topic `{}`",
                args.source.state.audit_topic
            );
        }
    }
    for (topic, groups) in &report.source_readers {
        eprintln!(
            "warning: sent back to `{topic}`, where every group reading it handles the records again: {}",
            if groups.is_empty() {
                "no group has committed offsets there".to_string()
            } else {
                groups.join(", ")
            }
        );
    }
    for open in &report.open_transactions {
        eprintln!("note: `{}` {open}", args.source.dlq_topic);
    }
    if let Some(e) = &report.audit_error {
        eprintln!("warning: the run's summary was not written: {e}");
    }
    Ok(())
}
