// Converts vega-datasets' flights-3m.parquet (3,000,000 US domestic flights, Jan-Jun 2001, BTS
// on-time data) into Criteo-format TSV for aiacc-train's `criteo_tsv` dataset (5 integer + 3
// categorical columns):
//
//   label  I1 distance  I2 hour  I3 weekday  I4 month  I5 day  C1 origin  C2 destination  C3 route
//
// label = delay >= 15 minutes (the BTS "late" rule). weekday: 0 = Sunday .. 6 = Saturday.
// Categoricals are 8 lowercase hex chars of the 32-bit FNV-1a hash of the UTF-8 string (route:
// "ORIGIN-DESTINATION"), as Criteo publishes hashed values. A null value becomes an empty field.
//
// Split: row i goes to test when fnv1a32(decimal i) mod 10 == 0 (10%), else train. Why a hash of
// the row index rather than a date cut: the file covers only six months, so a date cut (say June
// as the test set) would give the test split month values the train split never saw and a
// different delay season; an i.i.d. split keeps train and test from one distribution, which is
// what reader, convergence and AUC-comparison tests need. Rows are written in file (time) order.
//
// usage: node flights_to_criteo.mjs PARQUET OUT_DIR     writes OUT_DIR/train.tsv, OUT_DIR/test.tsv
// Both files are written to *.tmp first and renamed at the end, so a finished file is complete.
import { closeSync, mkdirSync, openSync, renameSync, statSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects } from 'hyparquet'
import { compressors } from 'hyparquet-compressors'

const kLateMinutes = 15n
const kTestModulus = 10

// 32-bit FNV-1a over the UTF-8 bytes of `text`.
function fnv1a32(text) {
  let hash = 0x811c9dc5
  for (const byte of Buffer.from(text, 'utf8')) {
    hash ^= byte
    hash = Math.imul(hash, 0x01000193) >>> 0
  }
  return hash >>> 0
}

const hex8 = (value) => value.toString(16).padStart(8, '0')
const categorical = (text) => (text === null || text === undefined ? '' : hex8(fnv1a32(text)))
const integer = (value) => (value === null || value === undefined ? '' : String(value))

// Buffered writer over a file descriptor: one writeSync per ~4 MB of lines.
class TsvWriter {
  constructor(path) {
    this.path = path
    this.fd = openSync(path + '.tmp', 'w')
    this.parts = []
    this.pending = 0
    this.lines = 0
    this.positives = 0
  }
  add(line, label) {
    this.parts.push(line)
    this.pending += line.length
    this.lines += 1
    this.positives += label
    if (this.pending > (1 << 22)) this.flush()
  }
  flush() {
    if (this.parts.length) writeSync(this.fd, this.parts.join(''))
    this.parts = []
    this.pending = 0
  }
  close() {
    this.flush()
    closeSync(this.fd)
    renameSync(this.path + '.tmp', this.path)
  }
}

async function main() {
  const [parquetPath, outDir] = process.argv.slice(2)
  if (!parquetPath || !outDir) {
    console.error('usage: node flights_to_criteo.mjs PARQUET OUT_DIR')
    process.exit(2)
  }
  const started = Date.now()
  mkdirSync(outDir, { recursive: true })
  const file = await asyncBufferFromFile(parquetPath)
  const metadata = await parquetMetadataAsync(file)
  const train = new TsvWriter(join(outDir, 'train.tsv'))
  const test = new TsvWriter(join(outDir, 'test.tsv'))
  const origins = new Set(), destinations = new Set(), routes = new Set()
  let skipped = 0
  let rowStart = 0
  // One row group at a time keeps memory to ~300k row objects.
  for (const group of metadata.row_groups) {
    const rowEnd = rowStart + Number(group.num_rows)
    const rows = await parquetReadObjects({ file, compressors, rowStart, rowEnd })
    for (let k = 0; k < rows.length; ++k) {
      const index = rowStart + k
      const { date, delay, distance, origin, destination } = rows[k]
      // Without a delay there is no label, and without a date no time features: skip the row.
      if (delay === null || delay === undefined || !(date instanceof Date)) {
        ++skipped
        continue
      }
      const label = delay >= kLateMinutes ? 1 : 0
      // The timestamp is local time stored without a zone: read its fields as UTC to get
      // the local clock back unchanged.
      const route = origin != null && destination != null ? `${origin}-${destination}` : null
      if (origin != null) origins.add(origin)
      if (destination != null) destinations.add(destination)
      if (route !== null) routes.add(route)
      const line = [label, integer(distance), date.getUTCHours(), date.getUTCDay(), date.getUTCMonth() + 1,
        date.getUTCDate(), categorical(origin), categorical(destination), categorical(route)].join('\t') + '\n'
      const writer = fnv1a32(String(index)) % kTestModulus === 0 ? test : train
      writer.add(line, label)
    }
    rowStart = rowEnd
  }
  train.close()
  test.close()
  const seconds = (Date.now() - started) / 1000
  const total = train.lines + test.lines
  const positives = train.positives + test.positives
  const pct = (p, n) => (n ? (100 * p / n).toFixed(2) : '0.00')
  const mb = (path) => (statSync(path).size / 1e6).toFixed(1)
  console.log(`flights: ${Number(metadata.num_rows)} parquet rows, ${total} written, ${skipped} skipped ` +
    `(no delay or date), ${pct(positives, total)}% positive (delay >= ${kLateMinutes} min), ${seconds.toFixed(1)} s`)
  console.log(`  ${train.path}: ${train.lines} lines, ${mb(train.path)} MB, ${pct(train.positives, train.lines)}% positive`)
  console.log(`  ${test.path}: ${test.lines} lines, ${mb(test.path)} MB, ${pct(test.positives, test.lines)}% positive`)
  console.log(`  distinct values: origin ${origins.size}, destination ${destinations.size}, route ${routes.size}`)
  console.log('  criteo_tsv options: {num_integer: 5, num_categorical: 3, categorical_names: [origin, dest, route]}')
}

main().catch((error) => {
  console.error(`flights_to_criteo: ${error.stack || error}`)
  process.exit(1)
})
