// The e2b JS SDK's side of bench/serve: N cycles of Sandbox.create +
// commands.run('true') + kill against gvx serve (E2B_* environment), each
// after waiting for the template's pool to be full again (when it has
// one, its hot sandboxes included); then CONCURRENT commands.run at once over a few sandboxes. Prints
// one JSON line: {"createRun": [ms], "cycle": [ms], "concurrent": {...}}.
const { Sandbox } = await import(process.env.E2B_MODULE || 'e2b')

const template = process.env.TEMPLATE || 'base'
const n = Number(process.env.N || 20)
const conc = Number(process.env.CONCURRENT || 0)
const api = process.env.E2B_API_URL
const key = process.env.E2B_API_KEY

async function poolFull() {
  for (;;) {
    const r = await fetch(`${api}/gvx/v1/templates/${template}`, { headers: { 'X-API-KEY': key } })
    const t = await r.json()
    if (!t.pool || (t.pool.ready >= t.pool.size && (t.pool.hotReady || 0) >= (t.pool.hot || 0))) return
    await new Promise((res) => setTimeout(res, 10))
  }
}

const createRun = []
const cycle = []
// One warm-up cycle (the SDK's connection pools, the image's first use).
await (await Sandbox.create(template)).kill()
for (let i = 0; i < n; i++) {
  await poolFull()
  const t0 = performance.now()
  const sbx = await Sandbox.create(template)
  await sbx.commands.run('true')
  const t1 = performance.now()
  await sbx.kill()
  const t2 = performance.now()
  createRun.push(t1 - t0)
  cycle.push(t2 - t0)
}

let concurrent = null
if (conc > 0) {
  const boxes = await Promise.all(Array.from({ length: 10 }, () => Sandbox.create(template)))
  const t0 = performance.now()
  const results = await Promise.allSettled(
    Array.from({ length: conc }, (_, i) => boxes[i % boxes.length].commands.run(`echo ${i}`))
  )
  const ms = performance.now() - t0
  const errors = results.filter((r) => r.status === 'rejected' || r.value.stdout !== `${results.indexOf(r)}\n`)
  const first = errors.find((r) => r.status === 'rejected')
  concurrent = { commands: conc, sandboxes: boxes.length, ms, errors: errors.length, firstError: first ? String(first.reason) : null }
  await Promise.all(boxes.map((b) => b.kill()))
}
console.log(JSON.stringify({ createRun, cycle, concurrent }))
