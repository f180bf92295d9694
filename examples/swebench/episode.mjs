// A SWE-bench-style episode with the official e2b JS SDK against gvx serve:
// a sandbox from the "swebench" template (a small Python repository with a
// failing test), then for each candidate patch: apply it, run the tests,
// read the result, and go back to the starting point (rollback to a
// checkpoint when gvx has checkpoint/restore, else gvx's reset to the
// template) before the next one.
//
//   npm install e2b@2.51.0
//   E2B_API_URL=http://127.0.0.1:7820 E2B_SANDBOX_URL=http://127.0.0.1:7820 \
//   E2B_API_KEY=e2b_… node episode.mjs
import { readFileSync, readdirSync } from 'node:fs'
import { join, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'

const { Sandbox } = await import(process.env.E2B_MODULE || 'e2b')
const here = dirname(fileURLToPath(import.meta.url))
const api = process.env.E2B_API_URL
const key = process.env.E2B_API_KEY

// gvx's own routes (the e2b SDK has no call for them).
async function gvx(path, body) {
  const res = await fetch(api + path, {
    method: 'POST',
    headers: { 'X-API-KEY': key, 'Content-Type': 'application/json' },
    body: JSON.stringify(body ?? {}),
  })
  const data = await res.json().catch(() => ({}))
  return { status: res.status, data }
}

function summary(out) {
  const ran = out.match(/Ran (\d+) tests?/)
  const failed = out.match(/FAILED \((.*)\)/)
  return `${ran ? ran[1] : '?'} tests, ${failed ? failed[1] : 'all passed'}`
}

const patches = readdirSync(join(here, 'patches')).filter((f) => f.endsWith('.diff')).sort()
const t0 = performance.now()
const sbx = await Sandbox.create('swebench', { timeoutMs: 600_000 })
console.log(`sandbox ${sbx.sandboxId} up in ${(performance.now() - t0).toFixed(0)} ms`)
let start = null
const cp = await gvx(`/gvx/v1/sandboxes/${sbx.sandboxId}/checkpoints`)
if (cp.status === 201) {
  start = cp.data.handle
  console.log(`checkpoint ${start}`)
} else {
  console.log(`no checkpoint (${cp.status}: ${cp.data.message}); going back by resetting to the template`)
}
const before = await sbx.commands.run('cd ~/repo && python3 -m unittest 2>&1', { timeoutMs: 60_000 }).catch((e) => e)
console.log(`before any patch: exit ${before.exitCode}, ${summary(before.stdout)}`)
let solved = null
for (const p of patches) {
  const t1 = performance.now()
  await sbx.files.write('/tmp/candidate.diff', readFileSync(join(here, 'patches', p), 'utf8'))
  const r = await sbx.commands
    .run('cd ~/repo && patch -p1 < /tmp/candidate.diff >/dev/null && python3 -m unittest 2>&1', { timeoutMs: 60_000 })
    .catch((e) => e) // CommandExitError carries the result of a failing run
  console.log(`${p}: exit ${r.exitCode}, ${summary(r.stdout)} (${(performance.now() - t1).toFixed(0)} ms)`)
  if (r.exitCode === 0) {
    solved = p
    break
  }
  const t2 = performance.now()
  const back = start
    ? await gvx(`/gvx/v1/sandboxes/${sbx.sandboxId}/rollback`, { handle: start })
    : await gvx(`/gvx/v1/sandboxes/${sbx.sandboxId}/reset`)
  if (back.status !== 200) throw new Error(`going back failed: ${back.status} ${back.data.message}`)
  const clean = await sbx.files.read('/home/user/repo/calc/__init__.py')
  if (clean.includes('s[mid + 1]')) throw new Error('the sandbox still has the rejected patch')
  console.log(`  back to the start (${start ? 'rollback' : 'reset'}) in ${(performance.now() - t2).toFixed(0)} ms`)
}
await sbx.kill()
console.log(solved ? `solved by ${solved}` : 'no patch solved the issue')
process.exit(solved ? 0 : 1)
