// A consumer group of two kafkajs (a pure-JavaScript implementation of the protocol) consumers
// in one process: both subscribe to TOPIC in GROUP from the beginning (`sessionTimeout` 6000,
// `heartbeatInterval` 1000, `autoCommit: false`) and run until the group gave each of them a
// share of the partitions (the shares disjoint, together every partition: kafkajs's GROUP_JOIN
// events say); a producer (acks -1) then sends COUNT records, `n-<i>` to partition i mod the
// partition count, and the two consumers read them in `consumer.run({eachMessage})`, each
// committing every record it processed (`commitOffsets`, the next offset) before taking the
// next one.
//
// Usage: node kafkajs_group.js BOOTSTRAP TOPIC GROUP COUNT
//
// Prints JSON lines, consumers numbered 0 and 1:
//   {"kind": "joined", "consumer": C, "partitions": [P, ...]}        (each GROUP_JOIN)
//   {"kind": "ready", "assignments": {"0": [P, ...], "1": [P, ...]}}  (the split, before producing)
//   {"kind": "produced", "count": N, "partitions": {"P": {"records": N, "end": NEXT}, ...}}
//   {"kind": "processed", "consumer": C, "partition": P, "offset": O, "value": TEXT}
//   {"kind": "committed", "consumer": C, "partition": P, "offset": NEXT}
//   {"kind": "commit_failed", "consumer": C, "partition": P, "offset": NEXT, "error": TEXT}
//   {"kind": "crash", "consumer": C, "error": TEXT}                   (kafkajs restarts it)
//   {"kind": "assignment", "consumer": C, "partitions": [P, ...]}     (its last, before leaving)
//   {"kind": "done", "produced": N, "read": DISTINCT}
// Exits non-zero when the group did not split the partitions, or the records were not all
// read, within 60 s, or when a step fails (kafkajs's error on standard error).

const { Kafka, Partitioners, logLevel } = require('kafkajs')

const [bootstrap, topic, groupId, countText] = process.argv.slice(2)
const count = Number(countText)
const MEMBERS = 2

const print = (value) => process.stdout.write(JSON.stringify(value) + '\n')
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const sorted = (numbers) => numbers.slice().sort((a, b) => a - b)

// The assignments when each member has a share and the shares split `every` partition.
function split(assignments, every) {
  const shares = [...Array(MEMBERS).keys()].map((index) => assignments.get(index) || [])
  const seen = shares.flat()
  const distinct = new Set(seen)
  const whole = distinct.size === every.length && every.every((p) => distinct.has(p))
  if (shares.every((share) => share.length > 0) && seen.length === distinct.size && whole) {
    return Object.fromEntries(shares.map((share, index) => [String(index), share]))
  }
  return null
}

async function produce(kafka, partitions) {
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner })
  await producer.connect()
  const shown = {}
  for (let first = 0; first < count; first += 100) {
    const messages = []
    const sent = new Map()
    for (let i = first; i < Math.min(first + 100, count); i++) {
      const partition = partitions[i % partitions.length]
      messages.push({ value: `n-${i}`, partition })
      sent.set(partition, (sent.get(partition) || 0) + 1)
    }
    const answers = await producer.send({ topic, messages })
    for (const { partition, errorCode, baseOffset } of answers) {
      if (errorCode !== 0) {
        throw new Error(`produce to partition ${partition} answered error ${errorCode}`)
      }
      const entry = shown[String(partition)] || { records: 0, end: 0 }
      entry.records += sent.get(partition)
      entry.end = Math.max(entry.end, Number(baseOffset) + sent.get(partition))
      shown[String(partition)] = entry
    }
  }
  await producer.disconnect()
  print({ kind: 'produced', count, partitions: shown })
}

async function main() {
  const deadline = Date.now() + 60000
  const kafka = new Kafka({
    clientId: 'kafkajs-group',
    brokers: [bootstrap],
    logLevel: logLevel.WARN,
    retry: { retries: 5 },
  })
  const admin = kafka.admin()
  await admin.connect()
  const metadata = await admin.fetchTopicMetadata({ topics: [topic] })
  await admin.disconnect()
  const partitions = sorted(metadata.topics[0].partitions.map(({ partitionId }) => partitionId))

  const assignments = new Map()
  const read = new Set()
  const consumers = []
  for (let index = 0; index < MEMBERS; index++) {
    const consumer = kafka.consumer({
      groupId,
      sessionTimeout: 6000,
      heartbeatInterval: 1000,
      maxWaitTimeInMs: 500,
    })
    consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
      const share = sorted(payload.memberAssignment[topic] || [])
      assignments.set(index, share)
      print({ kind: 'joined', consumer: index, partitions: share })
    })
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      print({ kind: 'crash', consumer: index, error: String(payload.error) })
    })
    await consumer.connect()
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        print({
          kind: 'processed',
          consumer: index,
          partition,
          offset: Number(message.offset),
          value: message.value.toString('utf8'),
        })
        read.add(`${partition}:${message.offset}`)
        const next = (BigInt(message.offset) + 1n).toString()
        try {
          await consumer.commitOffsets([{ topic, partition, offset: next }])
        } catch (err) {
          print({ kind: 'commit_failed', consumer: index, partition, offset: Number(next),
            error: String(err) })
          throw err
        }
        print({ kind: 'committed', consumer: index, partition, offset: Number(next) })
      },
    })
    consumers.push(consumer)
  }

  let ready = null
  while (ready === null && Date.now() < deadline) {
    await sleep(100)
    ready = split(assignments, partitions)
  }
  if (ready !== null) {
    print({ kind: 'ready', assignments: ready })
    await produce(kafka, partitions)
    while (read.size < count && Date.now() < deadline) {
      await sleep(100)
    }
  }
  // Each one's last assignment, before either leaves the group (which hands the other every
  // partition).
  const last = new Map(assignments)
  for (const index of consumers.keys()) {
    print({ kind: 'assignment', consumer: index, partitions: last.get(index) || [] })
  }
  for (const consumer of consumers) {
    await consumer.disconnect()
  }
  print({ kind: 'done', produced: count, read: read.size })
  if (ready === null) {
    console.error(`the group did not split the partitions: ${JSON.stringify([...assignments])}`)
    process.exit(1)
  }
  if (read.size < count) {
    console.error(`read ${read.size} of ${count} records`)
    process.exit(1)
  }
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : err)
  if (err && err.type) console.error(`kafkajs error type: ${err.type}`)
  process.exit(1)
})
