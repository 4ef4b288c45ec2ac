//! `PartitionRegistry`: the supervisor that maps `{topic}:{partition}` to its running actor.
//!
//! Only a write starts a partition that has no database yet; a read of a partition never
//! written answers `None` and creates nothing. A partition found on disk is started on its
//! first message, and woken once after the registry starts so that its retention runs. A
//! partition idle for `idle_stop_ms` is drained and stopped, and woken again when its oldest
//! hot record becomes due for age retention.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::{
    Actor, ActorFutureExt, Addr, AsyncContext, AtomicResponse, Context, Handler, Message,
    WrapFuture,
};

use crate::clock::Clock;
use crate::cold::ColdStore;
use crate::config::Config;
use crate::error::Error;
use crate::names::{PartitionId, validate_topic};
use crate::partition::{DeadLetter, Drain, PartitionActor, PartitionIdle, PartitionSetup};
use crate::store::{ColdFlushCounters, ColdTier, StoreOptions};

/// Wake-ups for readers waiting for new records: one per partition and one per topic.
#[derive(Debug, Default)]
pub(crate) struct Signals(std::sync::Mutex<HashMap<String, Arc<tokio::sync::Notify>>>);

impl Signals {
    /// Woken when `id` committed new records.
    pub(crate) fn partition(&self, id: &PartitionId) -> Arc<tokio::sync::Notify> {
        self.get(id.to_string())
    }

    /// Woken when any partition of `topic` committed new records.
    pub(crate) fn topic(&self, topic: &str) -> Arc<tokio::sync::Notify> {
        self.get(topic.to_owned())
    }

    fn get(&self, key: String) -> Arc<tokio::sync::Notify> {
        let mut signals = self.0.lock().unwrap_or_else(|poison| poison.into_inner());
        signals.entry(key).or_default().clone()
    }
}

/// Builds the dead-letter destination of a topic, if it has one.
pub(crate) type DeadLetterFor = Arc<dyn Fn(&str) -> Option<Arc<dyn DeadLetter>> + Send + Sync>;

/// The registry's actor state.
pub(crate) struct PartitionRegistry {
    config: Arc<Config>,
    cold: Option<Arc<dyn ColdStore>>,
    clock: Arc<dyn Clock>,
    dead_letter_for: DeadLetterFor,
    signals: Arc<Signals>,
    /// Every partition's store counts its cold flushes here.
    flush_counters: Arc<ColdFlushCounters>,
    running: HashMap<PartitionId, Running>,
    generations: u64,
}

struct Running {
    addr: Addr<PartitionActor>,
    generation: u64,
}

impl PartitionRegistry {
    pub(crate) fn new(
        config: Arc<Config>,
        cold: Option<Arc<dyn ColdStore>>,
        clock: Arc<dyn Clock>,
        dead_letter_for: DeadLetterFor,
        signals: Arc<Signals>,
        flush_counters: Arc<ColdFlushCounters>,
    ) -> Self {
        Self {
            signals,
            flush_counters,
            config,
            cold,
            clock,
            dead_letter_for,
            running: HashMap::new(),
            generations: 0,
        }
    }

    /// Where a partition's database lives: `{data_dir}/{topic}/{index}.sqlite`.
    fn path_of(&self, id: &PartitionId) -> PathBuf {
        self.config
            .storage
            .data_dir
            .join(id.topic())
            .join(format!("{}.sqlite", id.index()))
    }

    fn locate(
        &mut self,
        id: &PartitionId,
        create: bool,
        ctx: &mut Context<Self>,
    ) -> Result<Option<Addr<PartitionActor>>, Error> {
        if let Some(running) = self.running.get(id) {
            return Ok(Some(running.addr.clone()));
        }
        let path = self.path_of(id);
        if !create && !path.exists() {
            return Ok(None);
        }
        if let Some(folder) = path.parent() {
            std::fs::create_dir_all(folder).map_err(|err| Error::Unavailable {
                partition: id.to_string(),
                reason: format!("cannot create {}: {err}", folder.display()),
            })?;
        }
        self.generations += 1;
        let topic = self.config.topic(id.topic());
        let dead_letter = (self.dead_letter_for)(id.topic());
        let mut leases = topic.leases.options();
        leases.dead_letter = dead_letter.is_some();
        let options = StoreOptions {
            sync: self.config.storage.sync,
            max_batch_size: topic.log.max_batch_size,
            max_record_bytes: topic.log.max_record_bytes,
            clock: self.clock.clone(),
            retention: topic.retention.limits(),
            cold: self.cold.clone().map(|store| ColdTier {
                store,
                prefix: self.config.cold.prefix.clone(),
                topic: id.topic().to_owned(),
                partition: id.index(),
            }),
            leases,
            flush_counters: Some(self.flush_counters.clone()),
        };
        let setup = PartitionSetup {
            id: id.clone(),
            path,
            options,
            sweep_interval: Duration::from_millis(topic.retention.sweep_interval_ms),
            idle_stop: Duration::from_millis(self.config.partitions.idle_stop_ms),
            dead_letter,
            on_idle: Some(ctx.address().recipient()),
            generation: self.generations,
            appended: [self.signals.partition(id), self.signals.topic(id.topic())],
        };
        let addr = PartitionActor::start(setup)?;
        log::debug!("partition {id} started");
        self.running.insert(
            id.clone(),
            Running {
                addr: addr.clone(),
                generation: self.generations,
            },
        );
        Ok(Some(addr))
    }

    /// Every partition that has a database on disk.
    fn partitions_on_disk(&self) -> Vec<PartitionId> {
        let mut found = Vec::new();
        let Ok(topics) = std::fs::read_dir(&self.config.storage.data_dir) else {
            return found;
        };
        for topic in topics.flatten() {
            let name = topic.file_name().to_string_lossy().into_owned();
            if validate_topic(&name).is_err() || !topic.path().is_dir() {
                continue;
            }
            let Ok(files) = std::fs::read_dir(topic.path()) else {
                continue;
            };
            for file in files.flatten() {
                let file = file.file_name().to_string_lossy().into_owned();
                let index = file
                    .strip_suffix(".sqlite")
                    .and_then(|index| index.parse::<u32>().ok());
                if let Some(id) = index.and_then(|index| PartitionId::new(&name, index).ok()) {
                    found.push(id);
                }
            }
        }
        found.sort();
        found
    }

    /// Starts `id` (if it is not running) so that its retention runs.
    fn wake(&mut self, id: &PartitionId, ctx: &mut Context<Self>) {
        if let Err(err) = self.locate(id, false, ctx) {
            log::warn!("partition {id}: cannot wake it for retention: {err}");
        }
    }
}

impl Actor for PartitionRegistry {
    type Context = Context<Self>;

    /// Wakes every partition found on disk once, spread over one sweep interval, so retention
    /// runs on partitions nobody touches after a restart.
    fn started(&mut self, ctx: &mut Self::Context) {
        let found = self.partitions_on_disk();
        let spread = Duration::from_millis(self.config.retention.sweep_interval_ms);
        let count = found.len().max(1) as u32;
        for (position, id) in found.into_iter().enumerate() {
            ctx.run_later(spread * position as u32 / count, move |registry, ctx| {
                registry.wake(&id, ctx)
            });
        }
    }
}

/// Finds a partition's actor, starting it if it has a database, or if `create` (a write).
#[derive(Message, Debug)]
#[rtype(result = "Result<Option<Addr<PartitionActor>>, Error>")]
pub(crate) struct Locate {
    pub id: PartitionId,
    pub create: bool,
}

impl Handler<Locate> for PartitionRegistry {
    type Result = Result<Option<Addr<PartitionActor>>, Error>;

    fn handle(&mut self, locate: Locate, ctx: &mut Self::Context) -> Self::Result {
        self.locate(&locate.id, locate.create, ctx)
    }
}

impl Handler<PartitionIdle> for PartitionRegistry {
    /// Atomic: no partition is located (or started again) until this one has drained, so a
    /// database never has two writers.
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, idle: PartitionIdle, ctx: &mut Self::Context) -> Self::Result {
        let current = self
            .running
            .get(&idle.id)
            .is_some_and(|running| running.generation == idle.generation);
        if !current {
            return AtomicResponse::new(Box::pin(async {}.into_actor(self)));
        }
        let running = self.running.remove(&idle.id).expect("checked above");
        if let Some(wake_at) = idle.wake_at {
            let delay =
                Duration::from_millis(wake_at.saturating_sub(self.clock.now_ms()).max(0) as u64);
            let id = idle.id.clone();
            ctx.run_later(delay, move |registry, ctx| registry.wake(&id, ctx));
        }
        let id = idle.id;
        AtomicResponse::new(Box::pin(
            async move {
                let _ = running.addr.send(Drain).await;
            }
            .into_actor(self)
            .map(move |(), _, _| log::debug!("partition {id} stopped after being idle")),
        ))
    }
}

/// Stops every partition after committing what each has queued.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Shutdown;

impl Handler<Shutdown> for PartitionRegistry {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _: Shutdown, _: &mut Self::Context) -> Self::Result {
        let running: Vec<Running> = self.running.drain().map(|(_, running)| running).collect();
        AtomicResponse::new(Box::pin(
            async move {
                for running in running {
                    let _ = running.addr.send(Drain).await;
                }
            }
            .into_actor(self),
        ))
    }
}

/// Lists the topics that have at least one written partition, by name.
#[derive(Message, Debug)]
#[rtype(result = "Vec<String>")]
pub(crate) struct WrittenTopics;

impl Handler<WrittenTopics> for PartitionRegistry {
    type Result = Vec<String>;

    fn handle(&mut self, _: WrittenTopics, _: &mut Self::Context) -> Self::Result {
        let mut topics: Vec<String> = self
            .partitions_on_disk()
            .into_iter()
            .map(|id| id.topic().to_owned())
            .collect();
        topics.dedup();
        topics
    }
}

/// Lists the partitions whose actors are running (for tests and operators).
#[derive(Message, Debug)]
#[rtype(result = "Vec<PartitionId>")]
pub(crate) struct RunningPartitions;

impl Handler<RunningPartitions> for PartitionRegistry {
    type Result = Vec<PartitionId>;

    fn handle(&mut self, _: RunningPartitions, _: &mut Self::Context) -> Self::Result {
        let mut running: Vec<PartitionId> = self.running.keys().cloned().collect();
        running.sort();
        running
    }
}
