// The Vercel AI SDK (ai@6 with @ai-sdk/anthropic@3 / @ai-sdk/openai@3) and, for CLIENT_KIND
// `gemini`, the Google GenAI SDK (`@google/genai`, matrix_gemini.mjs) as real clients of ccmesh,
// driven by tests/it/sdk_matrix.rs in front of a scripted mock upstream of any format.
//
//   node matrix.mjs GATEWAY_URL CLIENT_KIND SCENARIO...
//
// CLIENT_KIND is `anthropic` (Messages), `openai-chat` (Chat Completions), `openai-responses`
// (Responses) or `gemini` (the Gemini API; its scenarios add count_tokens, error and stream_error). The scenarios run in order; each prints `ok: SCENARIO` once it passed. On the first
// mismatch or SDK error the script prints the scenario, the reason and whatever the SDK said to
// stderr and exits 1.
//
// MATRIX_SPEC (JSON, written by sdk_matrix.rs) says what the mock upstream answers, so what the
// SDK must report: for each turn the text, the tool calls and the usage as the upstream counted it
// (input without cache, cache read, cache write, output). MATRIX_TIMEOUT_SECS (default 120) bounds
// the whole run.
//
// Scenarios (the upstream requests they make, in order):
//   conversation           3: generateText with a text turn; then, with that exchange as history,
//                          a question and a tool whose `execute` answers, so the SDK sends the tool
//                          result itself (text and a tool call, then the final answer).
//   parallel_tools         2: a question the upstream answers with two tool calls and no text; the
//                          SDK runs both and sends both results.
//   stream_conversation,   the same with streamText, reading every part of fullStream.
//   stream_parallel_tools

import { isDeepStrictEqual, inspect } from 'node:util';

import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';

import { geminiScenarios } from './matrix_gemini.mjs';

const [gatewayArg, clientKind, ...scenarioNames] = process.argv.slice(2);
if (!gatewayArg || !clientKind || scenarioNames.length === 0) {
  console.error('usage: node matrix.mjs GATEWAY_URL CLIENT_KIND SCENARIO...');
  process.exit(2);
}
const gateway = gatewayArg.replace(/\/+$/, '');
const spec = JSON.parse(process.env.MATRIX_SPEC ?? 'null');
if (spec == null) {
  console.error('MATRIX_SPEC is not set');
  process.exit(2);
}

// A hung request fails the run instead of hanging it.
const timeoutSecs = Number(process.env.MATRIX_TIMEOUT_SECS ?? '120');
setTimeout(() => {
  console.error(`TIMEOUT: the run took more than ${timeoutSecs} s (scenario ${current})`);
  process.exit(3);
}, timeoutSecs * 1000).unref();

function makeModel(kind) {
  switch (kind) {
    case 'anthropic':
      return createAnthropic({ baseURL: `${gateway}/v1`, apiKey: 'sk-ant-client-key-not-forwarded' })(
        'claude-sonnet-4-5',
      );
    case 'openai-chat':
      return createOpenAI({ baseURL: `${gateway}/v1`, apiKey: 'sk-proj-client-key-not-forwarded' }).chat(
        'gpt-4o-mini',
      );
    case 'openai-responses':
      return createOpenAI({ baseURL: `${gateway}/v1`, apiKey: 'sk-proj-client-key-not-forwarded' }).responses(
        'gpt-4.1',
      );
    case 'gemini':
      // The Google GenAI SDK, not the AI SDK: matrix_gemini.mjs.
      return null;
    default:
      console.error(`unknown client kind ${kind}`);
      process.exit(2);
  }
}
const model = makeModel(clientKind);

class Mismatch extends Error {}

function eq(got, want, what) {
  if (!isDeepStrictEqual(got, want)) {
    throw new Mismatch(`${what}: got ${inspect(got, { depth: 6 })}, want ${inspect(want, { depth: 6 })}`);
  }
}

function check(cond, what) {
  if (!cond) throw new Mismatch(what);
}

/** The SDK's usage for a step against what the upstream reported for that turn. */
function checkUsage(usage, turnUsage, what) {
  const { input, cache_read: cacheRead, cache_write: cacheWrite, output } = turnUsage;
  const inputTotal = input + cacheRead + cacheWrite;
  eq(usage.inputTokens, inputTotal, `${what}: inputTokens`);
  eq(usage.outputTokens, output, `${what}: outputTokens`);
  eq(usage.totalTokens, inputTotal + output, `${what}: totalTokens`);
  eq(usage.inputTokenDetails?.noCacheTokens, input, `${what}: inputTokenDetails.noCacheTokens`);
  eq(usage.inputTokenDetails?.cacheReadTokens, cacheRead, `${what}: inputTokenDetails.cacheReadTokens`);
  // OpenAI formats report cache writes only when there were some.
  eq(usage.inputTokenDetails?.cacheWriteTokens ?? 0, cacheWrite, `${what}: inputTokenDetails.cacheWriteTokens`);
}

function checkStep(step, turn, finishReason, what) {
  eq(step.text, turn.text, `${what}: text`);
  eq(step.finishReason, finishReason, `${what}: finishReason`);
  checkUsage(step.usage, turn.usage, `${what}: usage`);
  eq(step.response.modelId, spec.upstream_model, `${what}: response.modelId (the model the upstream names)`);
  check(typeof step.response.id === 'string' && step.response.id.length > 0, `${what}: response.id`);
  eq(
    step.toolCalls.map((c) => ({ toolName: c.toolName, input: c.input, invalid: c.invalid ?? false })),
    turn.tools.map((t) => ({ toolName: t.name, input: t.arguments, invalid: false })),
    `${what}: toolCalls`,
  );
  const ids = step.toolCalls.map((c) => c.toolCallId);
  check(
    ids.every((id) => typeof id === 'string' && id.length > 0) && new Set(ids).size === ids.length,
    `${what}: toolCallIds ${inspect(ids)}`,
  );
  eq(
    step.toolResults.map((r) => ({ toolName: r.toolName, output: r.output })),
    turn.tools.map((t) => ({ toolName: t.name, output: spec.tool_results[t.arguments.city] })),
    `${what}: toolResults`,
  );
}

function weatherTool(executed) {
  return tool({
    description: spec.tool.description,
    inputSchema: jsonSchema(spec.tool.parameters),
    execute: async (input) => {
      executed.push(input);
      return spec.tool_results[input.city];
    },
  });
}

/** generateText, or streamText read part by part; returns what both have in common. */
async function call(options, stream, what) {
  const common = { model, maxRetries: 0, system: spec.system, ...options };
  if (!stream) {
    const r = await generateText(common);
    return { steps: r.steps, responseMessages: r.response.messages, totalUsage: r.totalUsage };
  }
  const r = streamText({ ...common, onError: () => {} });
  const parts = [];
  for await (const part of r.fullStream) {
    if (part.type === 'error') {
      throw new Mismatch(`${what}: the stream carried an error part: ${describe(part.error)}`);
    }
    parts.push(part);
  }
  const steps = await r.steps;
  // Per step: the text deltas add up to the step's text, and streamed tool input to its call.
  let step = -1;
  const texts = [];
  const toolInputs = [];
  for (const part of parts) {
    if (part.type === 'start-step') {
      step += 1;
      texts[step] = '';
      toolInputs[step] = {};
    } else if (part.type === 'text-delta') {
      texts[step] += part.text;
    } else if (part.type === 'tool-input-start') {
      toolInputs[step][part.id] = { toolName: part.toolName, text: '' };
    } else if (part.type === 'tool-input-delta') {
      check(toolInputs[step][part.id] != null, `${what}: tool-input-delta before tool-input-start: ${inspect(part)}`);
      toolInputs[step][part.id].text += part.delta;
    }
  }
  eq(step + 1, steps.length, `${what}: start-step parts`);
  const kinds = parts.map((p) => p.type);
  eq(kinds[0], 'start', `${what}: first stream part`);
  eq(kinds[kinds.length - 1], 'finish', `${what}: last stream part`);
  steps.forEach((s, i) => {
    eq(texts[i], s.text, `${what}: step ${i}: text deltas`);
    const streamed = Object.values(toolInputs[i]).map((t) => ({ toolName: t.toolName, input: JSON.parse(t.text) }));
    const calls = s.toolCalls.map((c) => ({ toolName: c.toolName, input: c.input }));
    eq(streamed, calls, `${what}: step ${i}: tool input deltas`);
  });
  return { steps, responseMessages: (await r.response).messages, totalUsage: await r.totalUsage };
}

async function conversation(stream) {
  const [hello, toolTurn, final] = spec.turns;
  const what = stream ? 'streamText' : 'generateText';
  // @ai-sdk/openai's Responses model sends its earlier output as `item_reference`s by default
  // (store: true), which only OpenAI itself can resolve; the gateway drops them for other formats
  // (a recorded loss). The plain conversation sends the items themselves (store: false, what a
  // stateless setup uses); the streamed one keeps the default.
  const providerOptions = clientKind === 'openai-responses' && !stream ? { openai: { store: false } } : undefined;

  // Turn 1: plain text.
  const messages = [{ role: 'user', content: spec.questions[0] }];
  const r1 = await call({ messages, providerOptions }, stream, `${what} turn 1`);
  eq(r1.steps.length, 1, `${what} turn 1: steps`);
  checkStep(r1.steps[0], hello, 'stop', `${what} turn 1`);

  // Turn 2: the history, a new question and a tool; the SDK runs the tool and sends its result.
  messages.push(...r1.responseMessages, { role: 'user', content: spec.questions[1] });
  const executed = [];
  const r2 = await call(
    { messages, tools: { [spec.tool.name]: weatherTool(executed) }, stopWhen: stepCountIs(3), providerOptions },
    stream,
    `${what} turn 2`,
  );
  eq(r2.steps.length, 2, `${what} turn 2: steps (tool call, then the answer to the tool result)`);
  checkStep(r2.steps[0], toolTurn, 'tool-calls', `${what} turn 2 step 1`);
  eq(executed, toolTurn.tools.map((t) => t.arguments), `${what} turn 2: tool executions`);
  checkStep(r2.steps[1], final, 'stop', `${what} turn 2 step 2`);
  const sum = (f) => f(toolTurn.usage) + f(final.usage);
  eq(
    [r2.totalUsage.inputTokens, r2.totalUsage.outputTokens],
    [sum((u) => u.input + u.cache_read + u.cache_write), sum((u) => u.output)],
    `${what} turn 2: totalUsage`,
  );
}

async function parallelTools(stream) {
  const [calls, final] = spec.parallel_turns;
  const what = stream ? 'streamText' : 'generateText';
  const providerOptions = clientKind === 'openai-responses' && !stream ? { openai: { store: false } } : undefined;
  const executed = [];
  const r = await call(
    {
      messages: [{ role: 'user', content: spec.questions[2] }],
      tools: { [spec.tool.name]: weatherTool(executed) },
      stopWhen: stepCountIs(3),
      providerOptions,
    },
    stream,
    `${what} parallel`,
  );
  eq(r.steps.length, 2, `${what} parallel: steps (two tool calls, then the answer to both results)`);
  checkStep(r.steps[0], calls, 'tool-calls', `${what} parallel step 1`);
  eq(executed, calls.tools.map((t) => t.arguments), `${what} parallel: tool executions`);
  checkStep(r.steps[1], final, 'stop', `${what} parallel step 2`);
}

function describe(error) {
  if (error == null) return String(error);
  const lines = [`${error.name ?? typeof error}: ${error.message ?? inspect(error)}`];
  for (const key of ['url', 'statusCode', 'responseBody', 'value', 'text']) {
    if (error[key] === undefined) continue;
    const value = typeof error[key] === 'string' ? error[key] : inspect(error[key], { depth: 8 });
    lines.push(`  ${key}: ${value}`);
  }
  if (error.cause) lines.push(`  cause: ${describe(error.cause)}`);
  if (error.stack && !(error instanceof Mismatch)) lines.push(error.stack);
  return lines.join('\n');
}

const scenarios =
  clientKind === 'gemini'
    ? geminiScenarios({ gateway, spec, eq, check, Mismatch })
    : {
        conversation: () => conversation(false),
        stream_conversation: () => conversation(true),
        parallel_tools: () => parallelTools(false),
        stream_parallel_tools: () => parallelTools(true),
      };

let current = '(none)';
for (const name of scenarioNames) {
  current = name;
  const scenario = scenarios[name];
  if (!scenario) {
    console.error(`unknown scenario ${name}; known: ${Object.keys(scenarios).join(', ')}`);
    process.exit(2);
  }
  try {
    await scenario();
  } catch (error) {
    console.error(`FAILED scenario ${name} (${clientKind} → ${spec.upstream}): ${describe(error)}`);
    if (error instanceof Mismatch) console.error(error.stack);
    process.exit(1);
  }
  console.log(`ok: ${name}`);
}
