// Reads simtel's Iceberg tables with two JavaScript libraries nobody here
// wrote, driven by cmd/simtel/lake_serve_iceberg_test.go:
//
//   - iceberg-js, an Iceberg REST catalog client, against `simtel lake serve
//     --listen`: lists the namespaces and the tables of telemetry, loads
//     the table's metadata;
//   - icebird, an Iceberg reader without a catalog, reads the table from
//     its metadata file over HTTP (a static file server over the lake).
//
// Environment: SIMTEL_ICEBERG_URI (the REST catalog), SIMTEL_ICEBERG_TOKEN
// (a bearer token, optional), SIMTEL_ICEBERG_TABLE (default cpu),
// SIMTEL_LAKE_ROOT (the lake's file:// URL) and SIMTEL_LAKE_HTTP (the
// static server's URL of the same directory). Prints one JSON line.
import { inflateRawSync } from 'node:zlib'
import { IcebergRestCatalog } from 'iceberg-js'
import { icebergRead } from 'icebird'

const env = name => {
  const v = process.env[name]
  if (!v) throw new Error(`${name} is not set`)
  return v
}
const uri = env('SIMTEL_ICEBERG_URI')
const lakeRoot = env('SIMTEL_LAKE_ROOT').replace(/\/$/, '')
const lakeHTTP = env('SIMTEL_LAKE_HTTP').replace(/\/$/, '')
const table = process.env.SIMTEL_ICEBERG_TABLE || 'cpu'
const token = process.env.SIMTEL_ICEBERG_TOKEN

const catalog = new IcebergRestCatalog({
  baseUrl: uri,
  auth: token ? { type: 'bearer', token } : { type: 'none' },
})
const { namespaces } = await catalog.listNamespaces()
const { identifiers } = await catalog.listTables({ namespace: ['telemetry'] })
const loaded = await catalog.loadTableResult({ namespace: ['telemetry'], name: table })
const metadata = loaded.metadata
const location = loaded['metadata-location']

// The table's files are named by file:// URLs, which Node's fetch does not
// open: the same paths are fetched from the static server instead. icebird
// reads the metadata, the manifest list, the manifests and the data files
// itself.
//
// One repair on the way: icebird inflates Avro's deflate blocks with
// hyparquet-compressors' gunzip, which (1.1.1 and 1.1.2) takes the bytes
// after a raw deflate stream for another gzip member and decodes the
// stream again into the full buffer; Go's compress/flate (iceberg-go's
// manifests) ends every stream with an empty stored block, and copying
// that past the buffer's end throws "offset is out of bounds". So the
// manifest list and manifests reach icebird as the same Avro records with
// the null codec (inflated here by Node's zlib). Data files and the
// metadata JSON are passed through untouched.
let avroRecoded = 0
const realFetch = globalThis.fetch
globalThis.fetch = async (url, init) => {
  let u = String(url)
  if (u.startsWith(lakeRoot + '/')) u = lakeHTTP + u.slice(lakeRoot.length)
  const res = await realFetch(u, init)
  if (!u.endsWith('.avro') || !res.ok) return res
  const recoded = avroNullCodec(new Uint8Array(await res.arrayBuffer()))
  return new Response(recoded, { status: res.status, headers: res.headers })
}

// avroNullCodec rewrites an Avro object container file with the deflate
// codec as the same records with the null codec; other files stay as they
// are.
function avroNullCodec(buf) {
  if (buf.length < 4 || buf[0] !== 0x4f || buf[1] !== 0x62 || buf[2] !== 0x6a || buf[3] !== 1) return buf
  const text = new TextDecoder()
  const p = { i: 4 }
  const meta = []
  for (;;) {
    let count = readLong(buf, p)
    if (count === 0) break
    if (count < 0) {
      count = -count
      readLong(buf, p) // the block's byte size
    }
    for (let k = 0; k < count; k++) {
      const key = text.decode(readBytes(buf, p))
      meta.push([key, readBytes(buf, p)])
    }
  }
  const sync = buf.subarray(p.i, p.i + 16)
  p.i += 16
  const codec = meta.find(([k]) => k === 'avro.codec')
  if (!codec || text.decode(codec[1]) !== 'deflate') return buf
  codec[1] = new TextEncoder().encode('null')
  const parts = [buf.subarray(0, 4), long(meta.length)]
  for (const [k, v] of meta) {
    const kb = new TextEncoder().encode(k)
    parts.push(long(kb.length), kb, long(v.length), v)
  }
  parts.push(long(0), sync)
  while (p.i < buf.length) {
    const count = readLong(buf, p)
    const data = inflateRawSync(readBytes(buf, p))
    p.i += 16 // the block's sync marker
    parts.push(long(count), long(data.length), data, sync)
  }
  avroRecoded++
  return Buffer.concat(parts)
}

// readLong reads an Avro long (zig-zag varint).
function readLong(buf, p) {
  let n = 0n
  let shift = 0n
  let b
  do {
    b = buf[p.i++]
    n |= BigInt(b & 0x7f) << shift
    shift += 7n
  } while (b & 0x80)
  return Number((n >> 1n) ^ -(n & 1n))
}

function readBytes(buf, p) {
  const n = readLong(buf, p)
  const out = buf.subarray(p.i, p.i + n)
  p.i += n
  return out
}

// long encodes an Avro long.
function long(v) {
  let n = BigInt.asUintN(64, (BigInt(v) << 1n) ^ (BigInt(v) >> 63n))
  const out = []
  do {
    let b = Number(n & 0x7fn)
    n >>= 7n
    if (n) b |= 0x80
    out.push(b)
  } while (n)
  return Uint8Array.from(out)
}
if (!location.startsWith(lakeRoot + '/')) {
  throw new Error(`metadata-location ${location} is not under the lake ${lakeRoot}`)
}
const rel = location.slice(lakeRoot.length)
const tableUrl = lakeHTTP + rel.slice(0, rel.indexOf('/metadata/'))
const metadataFileName = rel.slice(rel.lastIndexOf('/') + 1)
const rows = await icebergRead({ tableUrl, metadataFileName })

// Plain JSON values: longs (BigInt) as strings, times as Unix milliseconds.
const plain = v => {
  if (typeof v === 'bigint') return v.toString()
  if (v instanceof Date) return v.getTime()
  return v ?? null
}
const out = rows.map(r => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, plain(v)])))
out.sort((a, b) => Number(a._partition) - Number(b._partition) || Number(a._offset) - Number(b._offset))

console.log(JSON.stringify({
  namespaces: namespaces.map(n => n.namespace.join('.')),
  tables: identifiers.map(i => [...i.namespace, i.name].join('.')),
  formatVersion: metadata['format-version'],
  currentSnapshotId: String(metadata['current-snapshot-id']),
  metadataLocation: location,
  avroRecoded,
  schema: (metadata.schemas.find(s => s['schema-id'] === metadata['current-schema-id']) || { fields: [] }).fields.map(f => f.name),
  rows: out,
}))
