// Writes through the Kafka listener with kafkajs (a pure-JavaScript implementation of the
// protocol): its admin client creates a topic (the partition count left to the broker) and
// reads the topic's metadata, its producer (default settings: acks -1, topics created on
// first use) sends records with keys, repeated headers and values (JSON text, binary, a
// tombstone), one `send` each so that each record's offset is known, and the admin client
// then asks for the topic's offsets (ListOffsets). The test reads the records back with kcat
// and over REST (kafkajs reads only through a consumer group: kafkajs_group.js).
//
// Usage: node kafkajs_roundtrip.js BOOTSTRAP TOPIC
//
// Prints JSON lines, bytes in standard base64:
//   {"kind": "created", "created": true|false}
//   {"kind": "metadata", "partitions": [{"partition": P, "leader": L}, ...]}
//   {"kind": "produced", "partition": P, "offset": O, "key": B64|null, "value": B64|null,
//    "headers": [[NAME, B64], ...]}                       (in the order sent)
//   {"kind": "offsets", "partitions": [{"partition": P, "low": N, "high": N}, ...]}
// Exits non-zero, with kafkajs's error on standard error, when any step fails.

const { Kafka, Partitioners, logLevel } = require('kafkajs')

const [bootstrap, topic] = process.argv.slice(2)

const b64 = (data) => (data === null ? null : Buffer.from(data).toString('base64'))
const print = (value) => process.stdout.write(JSON.stringify(value) + '\n')

// Each record: its key, value and headers (an array value is a repeated header, in order).
const records = [
  {
    key: 'user-1',
    value: JSON.stringify({ from: 'kafkajs', text: 'héllo ✓' }, null, 1),
    headers: { h: ['1', '2'], trace: 'abc' },
  },
  {
    key: Buffer.from([0xff, 0x00, 0xfe]),
    value: Buffer.from([0x00, 0x01, 0xff, 0xc3, 0x28]),
    headers: {},
  },
  { key: 'user-2', value: 'plain text, not JSON', headers: { bin: Buffer.from([0xfe, 0xff]) } },
  { key: 'user-1', value: null, headers: {} },
  { key: 'user-3', value: '[1, 2, 3]', headers: { h: ['x', 'y', 'z'] } },
  { key: 'user-1', value: 'null', headers: {} },
]

// The headers of a record as [name, base64] pairs, in the order kafkajs encodes them.
function headerPairs(headers) {
  const pairs = []
  for (const [name, value] of Object.entries(headers)) {
    for (const one of Array.isArray(value) ? value : [value]) {
      pairs.push([name, b64(one)])
    }
  }
  return pairs
}

async function main() {
  const kafka = new Kafka({
    clientId: 'kafkajs-roundtrip',
    brokers: [bootstrap],
    logLevel: logLevel.WARN,
    retry: { retries: 2 },
  })
  const admin = kafka.admin()
  await admin.connect()
  const created = await admin.createTopics({ topics: [{ topic }], waitForLeaders: true })
  print({ kind: 'created', created })
  const metadata = await admin.fetchTopicMetadata({ topics: [topic] })
  print({
    kind: 'metadata',
    partitions: metadata.topics[0].partitions
      .map(({ partitionId, leader }) => ({ partition: partitionId, leader }))
      .sort((a, b) => a.partition - b.partition),
  })

  // Kafka's own partitioner (murmur2), named so that kafkajs does not warn about its default.
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner })
  await producer.connect()
  for (const record of records) {
    const [sent] = await producer.send({
      topic,
      messages: [{ key: record.key, value: record.value, headers: record.headers }],
    })
    if (sent.errorCode !== 0) {
      throw new Error(`produce answered error ${sent.errorCode}`)
    }
    print({
      kind: 'produced',
      partition: sent.partition,
      offset: Number(sent.baseOffset),
      key: b64(record.key),
      value: b64(record.value),
      headers: headerPairs(record.headers),
    })
  }
  await producer.disconnect()

  const offsets = await admin.fetchTopicOffsets(topic)
  print({
    kind: 'offsets',
    partitions: offsets
      .map(({ partition, low, high }) => ({ partition, low: Number(low), high: Number(high) }))
      .sort((a, b) => a.partition - b.partition),
  })
  await admin.disconnect()
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : err)
  if (err && err.type) console.error(`kafkajs error type: ${err.type}`)
  process.exit(1)
})
