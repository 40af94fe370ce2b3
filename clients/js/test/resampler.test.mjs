// The capture worklet's resampling math (src/audio/resampler.ts), on synthetic tones.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Downsampler, lowPass, tapsFor } from "../dist/lib/audio/resampler.js";

function tone(rate, hz, seconds, amplitude = 0.5) {
  const out = new Float32Array(Math.round(rate * seconds));
  for (let i = 0; i < out.length; i++) out[i] = amplitude * Math.sin((2 * Math.PI * hz * i) / rate);
  return out;
}

/** Runs `input` through a downsampler in 128-sample render quanta, as the worklet does. */
function resample(input, from, to, block = 128) {
  const ds = new Downsampler(from, to);
  const frames = [];
  for (let i = 0; i < input.length; i += block) ds.push(input.subarray(i, i + block), (f) => frames.push(f));
  const out = new Float32Array(frames.length * ds.frameSamples);
  frames.forEach((f, k) => out.set(Array.from(f, (v) => v / 32767), k * ds.frameSamples));
  return { out, frames, ds };
}

/** Amplitude of the `hz` component of `x` (sampled at `rate`), skipping the filter's start. */
function amplitudeAt(x, rate, hz, skip = 0.05) {
  let re = 0;
  let im = 0;
  const start = Math.round(skip * rate);
  const n = x.length - start;
  for (let i = start; i < x.length; i++) {
    re += x[i] * Math.cos((2 * Math.PI * hz * i) / rate);
    im += x[i] * Math.sin((2 * Math.PI * hz * i) / rate);
  }
  return (2 * Math.hypot(re, im)) / n;
}

const rms = (x, skip = 0) => Math.sqrt(x.subarray(skip).reduce((s, v) => s + v * v, 0) / (x.length - skip));

for (const from of [44100, 48000]) {
  test(`${from} Hz -> 16 kHz: 20 ms frames, the right number of samples`, () => {
    const { frames, ds } = resample(tone(from, 440, 1), from, 16000);
    assert.equal(ds.frameSamples, 320);
    assert.ok(frames.every((f) => f instanceof Int16Array && f.length === 320));
    // one second in: 16000 samples out (50 frames), give or take the last partial frame
    assert.equal(frames.length, 50);
  });

  test(`${from} Hz -> 16 kHz: a 1 kHz tone keeps its frequency and level`, () => {
    const { out } = resample(tone(from, 1000, 1), from, 16000);
    assert.ok(Math.abs(amplitudeAt(out, 16000, 1000) - 0.5) < 0.01, amplitudeAt(out, 16000, 1000));
    // taking 44.1 kHz for 48 kHz (or the reverse) would move the tone to 919 / 1088 Hz
    assert.ok(amplitudeAt(out, 16000, 918.75) < 0.01);
    assert.ok(amplitudeAt(out, 16000, 1088.4) < 0.01);
  });

  test(`${from} Hz -> 16 kHz: what cannot be carried does not fold into the speech band`, () => {
    // 12 kHz, above the 8 kHz the output can carry, would fold back to 4 kHz
    const { out } = resample(tone(from, 12000, 1), from, 16000);
    const skip = Math.round(0.05 * 16000);
    const level = 20 * Math.log10(rms(out, skip) / (0.5 / Math.SQRT2));
    assert.ok(level < -55, `aliased tone at ${level.toFixed(1)} dB`);
  });
}

test("upsampling (8 kHz context -> 16 kHz) interpolates without a filter", () => {
  const { out, ds } = resample(tone(8000, 500, 1), 8000, 16000);
  assert.equal(tapsFor(ds.step), 0);
  assert.ok(Math.abs(amplitudeAt(out, 16000, 500) - 0.5) < 0.01);
});

test("the filter has unity gain at DC and the output clips at full scale", () => {
  const taps = lowPass(0.15, tapsFor(3));
  assert.ok(Math.abs(taps.reduce((s, v) => s + v, 0) - 1) < 1e-5);
  const { frames } = resample(new Float32Array(48000).fill(1.5), 48000, 16000);
  assert.equal(frames.at(-1)[100], 32767);
  const { frames: low } = resample(new Float32Array(48000).fill(-1.5), 48000, 16000);
  assert.equal(low.at(-1)[100], -32768);
});

test("the output does not depend on how the input is cut into blocks", () => {
  const input = tone(44100, 700, 0.5);
  const a = resample(input, 44100, 16000, 128).out;
  const b = resample(input, 44100, 16000, 37).out;
  const c = resample(input, 44100, 16000, input.length).out;
  assert.deepEqual(a, b);
  assert.deepEqual(a, c);
});

test("a frame handed out is not written again (it may have been transferred)", () => {
  const ds = new Downsampler(48000, 16000);
  const frames = [];
  ds.push(tone(48000, 300, 0.1), (f) => frames.push(f));
  const copy = frames.map((f) => Int16Array.from(f));
  ds.push(tone(48000, 900, 0.1), () => {});
  assert.deepEqual(frames, copy);
});
