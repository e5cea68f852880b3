// KafkaJS compatibility check for simtel broker.
//
// KafkaJS is a pure-JavaScript Kafka client with its own implementation of
// the wire protocol. This script runs it unchanged against a broker:
//
//   SIMTEL_BROKER=127.0.0.1:9092 node tests/kafkajs/compat.mjs
//
// It creates a topic with the admin client, starts a two-member consumer
// group, produces messages with acks=-1 (half plain, half GZIP-compressed by
// an idempotent producer), consumes until all arrive, checks content and
// order per partition, checks the committed offsets (admin.fetchOffsets) and
// the group listing/description, and exits non-zero on any mismatch, printing
// what differed. broker/kafkajs_test.go runs it against an in-process broker.
//
// Environment:
//   SIMTEL_BROKER      broker address host:port (required)
//   KAFKAJS_MESSAGES   messages to produce (default 1000, even)
//   KAFKAJS_LOG_LEVEL  NOTHING, ERROR, WARN, INFO or DEBUG (default WARN)

import kafkajs from 'kafkajs'

const { Kafka, CompressionTypes, ConfigResourceTypes, AssignerProtocol, Partitioners, logLevel } = kafkajs

const broker = process.env.SIMTEL_BROKER
if (!broker) {
  console.error('SIMTEL_BROKER is not set (host:port of the broker)')
  process.exit(2)
}
const N = Number(process.env.KAFKAJS_MESSAGES || 1000)
if (!Number.isInteger(N) || N < 2 || N % 2 !== 0) {
  console.error(`KAFKAJS_MESSAGES must be an even integer >= 2, got ${process.env.KAFKAJS_MESSAGES}`)
  process.exit(2)
}
const PARTITIONS = 3
const RUN = `${process.pid}-${Date.now()}`
const topic = `kafkajs-compat-${RUN}`
const groupId = `kafkajs-group-${RUN}`
const retentionMs = '3600000'

const problems = []
function problem(msg) {
  problems.push(msg)
  console.error(`MISMATCH: ${msg}`)
}
function check(cond, msg) {
  if (!cond) problem(msg)
  return cond
}
function step(msg) {
  console.log(`[kafkajs] ${msg}`)
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

// waitUntil polls fn until it returns true; on timeout it records a problem
// with the description returned by state().
async function waitUntil(what, timeoutMs, fn, state) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await fn()) return true
    if (Date.now() > deadline) {
      problem(`timed out after ${timeoutMs} ms waiting for ${what}; state: ${await state()}`)
      return false
    }
    await sleep(100)
  }
}

const kafka = new Kafka({
  clientId: 'simtel-kafkajs-compat',
  brokers: [broker],
  logLevel: logLevel[process.env.KAFKAJS_LOG_LEVEL || 'WARN'] ?? logLevel.WARN,
  retry: { retries: 5, initialRetryTime: 100 },
  connectionTimeout: 5000,
  requestTimeout: 15000,
})

// Message i goes to partition i % PARTITIONS; expected[p] lists what each
// offset of partition p must hold, in produce order.
const base = Date.now()
const expected = Array.from({ length: PARTITIONS }, () => [])
function makeMessage(i) {
  const m = {
    partition: i % PARTITIONS,
    key: `key-${i}`,
    value: `kafkajs-${String(i).padStart(6, '0')}-${'x'.repeat(i % 50)}`,
    headers: { idx: String(i), src: 'kafkajs' },
    timestamp: String(base + i),
  }
  expected[m.partition].push(m)
  return m
}

// received[p]: what the consumers handed us for partition p, in arrival order.
const received = Array.from({ length: PARTITIONS }, () => [])
let receivedCount = 0

async function main() {
  const admin = kafka.admin()
  await admin.connect()

  // --- topic via admin ---------------------------------------------------
  step(`creating topic ${topic} with ${PARTITIONS} partitions`)
  const created = await admin.createTopics({
    topics: [{ topic, numPartitions: PARTITIONS, replicationFactor: 1, configEntries: [{ name: 'retention.ms', value: retentionMs }] }],
    waitForLeaders: true,
  })
  check(created === true, `createTopics returned ${created}, want true`)
  const again = await admin.createTopics({ topics: [{ topic, numPartitions: PARTITIONS }] })
  check(again === false, `createTopics of an existing topic returned ${again}, want false`)

  const topics = await admin.listTopics()
  check(topics.includes(topic), `listTopics does not include ${topic}: ${JSON.stringify(topics)}`)
  const md = await admin.fetchTopicMetadata({ topics: [topic] })
  const tmd = md.topics.find(t => t.name === topic)
  check(tmd && tmd.partitions.length === PARTITIONS,
    `fetchTopicMetadata: ${JSON.stringify(md)}, want ${PARTITIONS} partitions`)
  const cfg = await admin.describeConfigs({
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['retention.ms'] }],
    includeSynonyms: false,
  })
  const ret = cfg.resources[0]?.configEntries?.find(e => e.configName === 'retention.ms')
  check(ret && ret.configValue === retentionMs,
    `describeConfigs retention.ms: ${JSON.stringify(ret)}, want ${retentionMs}`)

  // --- consumer group with two members -----------------------------------
  const members = []
  for (const name of ['c1', 'c2']) {
    const consumer = kafka.consumer({
      groupId,
      sessionTimeout: 10000,
      rebalanceTimeout: 15000,
      heartbeatInterval: 500,
      maxWaitTimeInMs: 200,
      retry: { retries: 10 },
    })
    await consumer.connect()
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    const member = { name, consumer, partitions: new Set() }
    await consumer.run({
      eachMessage: async ({ topic: t, partition, message }) => {
        if (t !== topic) {
          problem(`${name} got a message from topic ${t}`)
          return
        }
        member.partitions.add(partition)
        received[partition].push({ member: name, offset: message.offset, key: message.key?.toString(),
          value: message.value?.toString(), timestamp: message.timestamp,
          headers: Object.fromEntries(Object.entries(message.headers || {}).map(([k, v]) => [k, v?.toString()])) })
        receivedCount++
      },
    })
    members.push(member)
  }

  const describeGroup = async () => {
    const { groups } = await admin.describeGroups([groupId])
    return groups.find(g => g.groupId === groupId)
  }
  const assignmentOf = m => {
    if (!m.memberAssignment || m.memberAssignment.length === 0) return []
    const a = AssignerProtocol.MemberAssignment.decode(m.memberAssignment)
    return (a && a.assignment[topic]) || []
  }
  step('waiting for the group to settle with two members')
  let lastGroup
  await waitUntil('group Stable with 2 members sharing all partitions', 30000, async () => {
    lastGroup = await describeGroup()
    if (!lastGroup || lastGroup.state !== 'Stable' || lastGroup.members.length !== 2) return false
    const all = lastGroup.members.flatMap(assignmentOf).sort()
    return lastGroup.members.every(m => assignmentOf(m).length > 0) && all.join() === [...Array(PARTITIONS).keys()].join()
  }, () => JSON.stringify(lastGroup && { state: lastGroup.state, members: lastGroup.members.map(m => ({ id: m.memberId, assigned: assignmentOf(m) })) }))
  if (lastGroup) {
    check(lastGroup.protocolType === 'consumer', `describeGroups protocolType ${lastGroup.protocolType}, want consumer`)
    check(lastGroup.protocol === 'RoundRobinAssigner', `describeGroups protocol ${lastGroup.protocol}, want RoundRobinAssigner`)
    for (const m of lastGroup.members) {
      check(m.clientId === 'simtel-kafkajs-compat', `describeGroups member ${m.memberId} clientId ${m.clientId}`)
      check(typeof m.clientHost === 'string' && m.clientHost.length > 0, `describeGroups member ${m.memberId} clientHost ${m.clientHost}`)
    }
  }
  const listed = await admin.listGroups()
  const lg = listed.groups.find(g => g.groupId === groupId)
  check(lg && lg.protocolType === 'consumer', `listGroups: ${JSON.stringify(listed.groups)}, want ${groupId} with protocolType consumer`)

  // --- produce -------------------------------------------------------------
  // checkAcks verifies the offsets the broker assigned to one send().
  const producedPerPartition = Array(PARTITIONS).fill(0)
  const checkAcks = (what, batch, meta) => {
    const counts = Array(PARTITIONS).fill(0)
    for (const m of batch) counts[m.partition]++
    for (let p = 0; p < PARTITIONS; p++) {
      if (counts[p] === 0) continue
      const r = meta.find(x => x.topicName === topic && x.partition === p)
      if (check(r, `${what}: no produce result for partition ${p}: ${JSON.stringify(meta)}`)) {
        check(r.errorCode === 0, `${what}: partition ${p} error code ${r.errorCode}`)
        check(String(r.baseOffset) === String(producedPerPartition[p]),
          `${what}: partition ${p} base offset ${r.baseOffset}, want ${producedPerPartition[p]}`)
      }
      producedPerPartition[p] += counts[p]
    }
  }

  step(`producing ${N / 2} messages, acks=-1, no compression`)
  const producer = kafka.producer({ allowAutoTopicCreation: false, createPartitioner: Partitioners.DefaultPartitioner })
  await producer.connect()
  for (let i = 0; i < N / 2; i += 100) {
    const batch = []
    for (let j = i; j < Math.min(i + 100, N / 2); j++) batch.push(makeMessage(j))
    const meta = await producer.send({ topic, acks: -1, messages: batch })
    checkAcks(`plain send of ${i}..`, batch, meta)
  }
  await producer.disconnect()

  step(`producing ${N / 2} messages, acks=-1, GZIP, idempotent producer`)
  // KafkaJS warns that bounded retries (5, from the client config) weaken
  // its exactly-once guarantee; a bounded run is what a test wants.
  const idem = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false,
    createPartitioner: Partitioners.DefaultPartitioner })
  await idem.connect()
  for (let i = N / 2; i < N; i += 100) {
    const batch = []
    for (let j = i; j < Math.min(i + 100, N); j++) batch.push(makeMessage(j))
    const meta = await idem.send({ topic, acks: -1, compression: CompressionTypes.GZIP, messages: batch })
    checkAcks(`gzip send of ${i}..`, batch, meta)
  }
  await idem.disconnect()

  const offsets = await admin.fetchTopicOffsets(topic)
  for (let p = 0; p < PARTITIONS; p++) {
    const o = offsets.find(x => x.partition === p)
    check(o && o.low === '0' && o.high === String(expected[p].length),
      `fetchTopicOffsets partition ${p}: ${JSON.stringify(o)}, want low 0 high ${expected[p].length}`)
  }

  // --- consume and compare -----------------------------------------------
  step('consuming')
  await waitUntil(`all ${N} messages consumed`, 60000, () => receivedCount >= N,
    () => `${receivedCount} of ${N} received; per partition ${received.map(r => r.length).join('/')}`)
  await sleep(1000) // anything beyond N would be a duplicate
  check(receivedCount === N, `received ${receivedCount} messages, want ${N}`)
  for (let p = 0; p < PARTITIONS; p++) {
    const got = received[p]
    const want = expected[p]
    check(got.length === want.length, `partition ${p}: received ${got.length} messages, want ${want.length}`)
    const owners = new Set(got.map(g => g.member))
    check(owners.size <= 1, `partition ${p} consumed by several members: ${[...owners].join(',')}`)
    let shown = 0
    for (let i = 0; i < Math.min(got.length, want.length) && shown < 10; i++) {
      const g = got[i]
      const w = want[i]
      const diffs = []
      if (g.offset !== String(i)) diffs.push(`offset ${g.offset} want ${i}`)
      if (g.key !== w.key) diffs.push(`key ${JSON.stringify(g.key)} want ${JSON.stringify(w.key)}`)
      if (g.value !== w.value) diffs.push(`value ${JSON.stringify(g.value)} want ${JSON.stringify(w.value)}`)
      if (g.timestamp !== w.timestamp) diffs.push(`timestamp ${g.timestamp} want ${w.timestamp}`)
      if (JSON.stringify(g.headers) !== JSON.stringify(w.headers)) {
        diffs.push(`headers ${JSON.stringify(g.headers)} want ${JSON.stringify(w.headers)}`)
      }
      if (diffs.length > 0) {
        problem(`partition ${p} message #${i}: ${diffs.join('; ')}`)
        shown++
      }
    }
  }

  // --- committed offsets ---------------------------------------------------
  step('checking committed offsets')
  let lastOffsets
  await waitUntil('committed offsets at the end of every partition', 20000, async () => {
    const res = await admin.fetchOffsets({ groupId, topics: [topic] })
    lastOffsets = res.find(r => r.topic === topic)?.partitions || []
    return [...Array(PARTITIONS).keys()].every(p =>
      lastOffsets.find(x => x.partition === p)?.offset === String(expected[p].length))
  }, () => `${JSON.stringify(lastOffsets)}, want ${expected.map(e => e.length).join('/')}`)

  const stable = await describeGroup()
  check(stable && stable.state === 'Stable' && stable.members.length === 2,
    `describeGroups while consuming: ${stable && stable.state} with ${stable && stable.members.length} members, want Stable with 2`)

  // --- members leave: group empty, offsets kept ---------------------------
  step('stopping consumers')
  for (const m of members) await m.consumer.disconnect()
  const empty = await describeGroup()
  check(empty && empty.state === 'Empty' && empty.members.length === 0,
    `describeGroups after consumers left: ${empty && empty.state} with ${empty && empty.members.length} members, want Empty with 0`)
  const after = (await admin.fetchOffsets({ groupId, topics: [topic] })).find(r => r.topic === topic)?.partitions || []
  for (let p = 0; p < PARTITIONS; p++) {
    const o = after.find(x => x.partition === p)
    check(o && o.offset === String(expected[p].length),
      `fetchOffsets after consumers left, partition ${p}: ${JSON.stringify(o)}, want ${expected[p].length}`)
  }

  // --- delete the topic ------------------------------------------------------
  await admin.deleteTopics({ topics: [topic] })
  const left = await admin.listTopics()
  check(!left.includes(topic), `listTopics still includes ${topic} after deleteTopics`)
  await admin.disconnect()
}

const watchdog = setTimeout(() => {
  console.error(`TIMEOUT: compat check did not finish in 150 s; received ${receivedCount} of ${N}`)
  process.exit(3)
}, 150000)

try {
  await main()
} catch (e) {
  console.error(`ERROR: ${e && e.stack ? e.stack : e}`)
  if (e && e.cause) console.error(`cause: ${e.cause.stack || e.cause}`)
  clearTimeout(watchdog)
  process.exit(2)
}
clearTimeout(watchdog)
if (problems.length > 0) {
  console.error(`FAIL: ${problems.length} mismatch(es)`)
  process.exit(1)
}
console.log(`OK: ${N} messages produced and consumed by KafkaJS, ${PARTITIONS} partitions, offsets committed`)
process.exit(0)
