//! `durability produce`: JSON lines from standard input or files, sent in batches to one
//! partition or, by a field of each line, to the partition of its key.
//!
//! Lines are read and checked one batch ahead of what is sent, in order: a line that is not
//! JSON (or lacks a named field) stops the command before anything after it is sent, and says
//! its line number; the batches before it are sent. One batch is in flight at a time, so the
//! records keep the order of the lines. Every record carries a deduplication key (the
//! `--dedup-field`'s value, or one the client makes), so a batch retried after a failure never
//! appends twice.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use durability::client::{Client, Event, Record};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::remote::{Failure, Remote};

/// `durability produce`.
#[derive(clap::Args, Debug)]
pub(crate) struct Produce {
    /// The topic.
    #[arg(short, long)]
    topic: String,
    /// The partition every line goes to (default 0, without a key field).
    #[arg(short, long, conflicts_with = "partition_key_field")]
    partition: Option<u32>,
    /// Sends each line to the partition of the value of this field (a keyed event): the same
    /// value, the same partition.
    #[arg(long, visible_alias = "key-field", value_name = "FIELD")]
    partition_key_field: Option<String>,
    /// Takes each line's deduplication key from this field: a line sent again with the same
    /// value is not appended again, by this or any later run.
    #[arg(long, value_name = "FIELD")]
    dedup_field: Option<String>,
    /// Lines per request (at most the server's log.max_batch_size).
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Prints no offsets.
    #[arg(short, long)]
    quiet: bool,
    /// Skips a line that is not JSON (reported on standard error) instead of stopping.
    #[arg(long)]
    skip_bad: bool,
    /// Files of JSON lines, read in order (default: standard input).
    files: Vec<PathBuf>,
    #[command(flatten)]
    remote: Remote,
}

/// An input, named for messages.
type Input = (String, Box<dyn BufRead>);

/// One line, ready to send.
struct Line {
    /// Its number in its input, from 1.
    number: usize,
    record: Record,
    /// Its partition key, with `--partition-key-field`.
    partition_key: Option<String>,
}

impl Produce {
    pub(crate) async fn run(self) -> Result<(), Failure> {
        if self.batch == 0 {
            return Err(Failure::usage("--batch must be at least 1"));
        }
        let client = self.remote.client()?;
        let progress = std::io::stderr().is_terminal();
        let mut sent = 0usize;
        let mut batch = Vec::with_capacity(self.batch);
        for input in self.inputs()? {
            let (name, reader) = input;
            for (index, text) in reader.lines().enumerate() {
                let text = text.map_err(|err| Failure::usage(format!("{name}: {err}")))?;
                if text.trim().is_empty() {
                    continue;
                }
                match self.line(index + 1, &text) {
                    Ok(line) => batch.push(line),
                    Err(why) if self.skip_bad => {
                        let _ = writeln!(std::io::stderr(), "{name}:{}: skipped: {why}", index + 1);
                    }
                    Err(why) => {
                        self.send(&client, &mut batch, &mut sent).await?;
                        return Err(Failure::usage(format!(
                            "{name}:{}: {why}; nothing after it was sent",
                            index + 1
                        )));
                    }
                }
                if batch.len() == self.batch {
                    self.send(&client, &mut batch, &mut sent).await?;
                    if progress {
                        let _ = write!(std::io::stderr(), "\r{sent} records sent");
                    }
                }
            }
        }
        self.send(&client, &mut batch, &mut sent).await?;
        if progress {
            let _ = writeln!(std::io::stderr(), "\r{sent} records sent");
        }
        Ok(())
    }

    /// The inputs in order, each with its name for messages.
    fn inputs(&self) -> Result<Vec<Input>, Failure> {
        if self.files.is_empty() {
            return Ok(vec![(
                "stdin".to_owned(),
                Box::new(std::io::stdin().lock()),
            )]);
        }
        self.files
            .iter()
            .map(|path| {
                let file = std::fs::File::open(path)
                    .map_err(|err| Failure::usage(format!("{}: {err}", path.display())))?;
                let reader: Box<dyn BufRead> = Box::new(std::io::BufReader::new(file));
                Ok((path.display().to_string(), reader))
            })
            .collect()
    }

    /// The line `text`, number `number`, as a record; why not when it is not JSON or lacks a
    /// field the command names.
    fn line(&self, number: usize, text: &str) -> Result<Line, String> {
        let payload: Box<RawValue> =
            serde_json::from_str(text).map_err(|err| format!("not JSON: {err}"))?;
        let fields = [&self.partition_key_field, &self.dedup_field];
        let value: Option<Value> = if fields.iter().any(|field| field.is_some()) {
            Some(serde_json::from_str(payload.get()).map_err(|err| err.to_string())?)
        } else {
            None
        };
        let field = |name: &Option<String>| -> Result<Option<String>, String> {
            let (Some(name), Some(value)) = (name, &value) else {
                return Ok(None);
            };
            match value.get(name) {
                Some(Value::String(text)) => Ok(Some(text.clone())),
                Some(Value::Null) | None => Err(format!("no field {name:?}")),
                Some(other) => Ok(Some(other.to_string())),
            }
        };
        let partition_key = field(&self.partition_key_field)?;
        let mut record = Record::raw(payload);
        if let Some(key) = field(&self.dedup_field)? {
            record = record.key(key);
        }
        Ok(Line {
            number,
            record,
            partition_key,
        })
    }

    /// Sends `batch` (emptying it) and prints where its records went.
    async fn send(
        &self,
        client: &Client,
        batch: &mut Vec<Line>,
        sent: &mut usize,
    ) -> Result<(), Failure> {
        if batch.is_empty() {
            return Ok(());
        }
        let lines = std::mem::take(batch);
        let first = lines[0].number;
        let places: Vec<String> = if self.partition_key_field.is_some() {
            let events = lines.into_iter().map(|line| {
                let key = line.partition_key.expect("every line has its key");
                Event::new(key, line.record)
            });
            let produced = client.produce(&self.topic, events).await;
            let produced = produced.map_err(|err| from_line(first, err))?;
            produced
                .records
                .iter()
                .map(|place| format!("{}:{}", place.partition, place.offset))
                .collect()
        } else {
            let partition = self.partition.unwrap_or(0);
            let records = lines.into_iter().map(|line| line.record);
            let appended = client.append(&self.topic, partition, records).await;
            let appended = appended.map_err(|err| from_line(first, err))?;
            appended
                .offsets
                .iter()
                .map(|offset| format!("{partition}:{offset}"))
                .collect()
        };
        *sent += places.len();
        if !self.quiet {
            let mut out = std::io::stdout().lock();
            for place in places {
                writeln!(out, "{place}")?;
            }
        }
        Ok(())
    }
}

/// `error`, saying which line its batch began with.
fn from_line(first: usize, error: durability::client::ClientError) -> Failure {
    let mut failure = Failure::from(error);
    failure.message = format!("the batch from line {first}: {}", failure.message);
    failure
}
