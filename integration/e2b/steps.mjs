// Steps of the SDK scripts: each runs, prints one line ("ok NAME (N ms)",
// or "FAIL NAME: …" and throws), and is counted for the summary line
// the Go tests look for.
const steps = []

export async function step(name, fn) {
  const t0 = performance.now()
  try {
    await fn()
  } catch (e) {
    console.log(`FAIL ${name}: ${e?.stack || e}`)
    throw e
  }
  steps.push(name)
  console.log(`ok ${name} (${(performance.now() - t0).toFixed(1)} ms)`)
}

export function summary() {
  console.log(`${steps.length} passed, 0 failed`)
}
