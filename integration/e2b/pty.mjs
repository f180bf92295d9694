// The e2b JS SDK's terminal (sbx.pty) against gvx serve: create, resize,
// input, output, exit. Run by integration/serve_test.go (TestServeE2BPTY).
import assert from 'node:assert/strict'

const { Sandbox } = await import(process.env.E2B_MODULE || 'e2b')
const sbx = await Sandbox.create(process.env.E2B_TEMPLATE || 'base')
try {
  let out = ''
  const dec = new TextDecoder()
  const term = await sbx.pty.create({ cols: 80, rows: 24, timeoutMs: 60_000, onData: (d) => { out += dec.decode(d) } })
  assert.ok(term.pid > 0)
  await sbx.pty.resize(term.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size; echo pty-$((6*7)); exit 3\n'))
  const r = await term.wait().catch((e) => e)
  assert.equal(r.exitCode, 3, `exit: ${r}`)
  assert.match(out, /pty-42/)
  assert.match(out, /30 100/)
  console.log('ok pty (create, resize, input, output, exit)')
  console.log('1 passed, 0 failed')
} finally {
  await sbx.kill()
}
