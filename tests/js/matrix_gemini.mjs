// The Google GenAI SDK (`@google/genai`) as a Gemini client in the real-client matrix: the
// scenarios `matrix.mjs` runs for CLIENT_KIND `gemini`, against the gateway's inbound Gemini API
// (`/v1beta/models/{model}:generateContent`, `:streamGenerateContent?alt=sse`, `:countTokens`).
//
// History is kept as an application using the SDK keeps it: the model's returned `Content` (its
// thought signatures included) for a plain answer, the text joined and the calls as they came for a
// stream; tool results as `functionResponse` parts with the calls' ids.

import { ApiError, FinishReason, GoogleGenAI } from '@google/genai';

export function geminiScenarios({ gateway, spec, eq, check, Mismatch }) {
  const ai = new GoogleGenAI({
    apiKey: 'AIza-client-key-not-forwarded',
    httpOptions: { baseUrl: gateway, apiVersion: 'v1beta', timeout: 30000 },
  });
  const model = spec.gemini.model;
  const tools = [
    {
      functionDeclarations: [
        { name: spec.tool.name, description: spec.tool.description, parametersJsonSchema: spec.tool.parameters },
      ],
    },
  ];
  const user = (text) => ({ role: 'user', parts: [{ text }] });
  const textOf = (parts) => (parts ?? []).filter((p) => p.text && !p.thought).map((p) => p.text).join('');
  const wantCalls = (turn) => turn.tools.map((t) => ({ name: t.name, args: t.arguments }));
  const totalInput = (u) => u.input + u.cache_read + u.cache_write;

  async function ask(history, withTools, turn, stream, what) {
    const request = {
      model,
      contents: history,
      config: { systemInstruction: spec.system, ...(withTools ? { tools } : {}) },
    };
    let last;
    let content;
    if (!stream) {
      last = await ai.models.generateContent(request);
      content = last.candidates[0].content;
    } else {
      const chunks = [];
      for await (const chunk of await ai.models.generateContentStream(request)) chunks.push(chunk);
      eq(new Set(chunks.map((c) => c.responseId)).size, 1, `${what}: one responseId across the chunks`);
      const finishes = chunks.filter((c) => c.candidates?.[0]?.finishReason);
      eq(finishes.length, 1, `${what}: one chunk with a finishReason`);
      last = chunks[chunks.length - 1];
      check(last.candidates[0].finishReason != null, `${what}: the finishReason comes last`);
      const allParts = chunks.flatMap((c) => c.candidates?.[0]?.content?.parts ?? []);
      const text = textOf(allParts);
      content = {
        role: 'model',
        parts: [...(text ? [{ text }] : []), ...allParts.filter((p) => p.functionCall)],
      };
    }
    check(typeof last.responseId === 'string' && last.responseId.length > 0, `${what}: responseId`);
    eq(last.modelVersion, spec.upstream_model, `${what}: modelVersion`);
    eq(content.role, 'model', `${what}: role`);
    eq(textOf(content.parts), turn.text, `${what}: text`);
    const calls = (content.parts ?? []).filter((p) => p.functionCall).map((p) => p.functionCall);
    eq(calls.map((c) => ({ name: c.name, args: c.args })), wantCalls(turn), `${what}: function calls`);
    const ids = calls.map((c) => c.id);
    check(ids.every((id) => typeof id === 'string' && id) && new Set(ids).size === ids.length, `${what}: call ids`);
    eq(last.candidates[0].finishReason, FinishReason.STOP, `${what}: finishReason`);
    const u = turn.usage;
    const m = last.usageMetadata;
    check(m != null, `${what}: no usageMetadata`);
    eq(
      [m.promptTokenCount, m.cachedContentTokenCount ?? 0, m.candidatesTokenCount, m.totalTokenCount],
      [totalInput(u), u.cache_read, u.output, totalInput(u) + u.output],
      `${what}: usage (prompt, cached, candidates, total)`,
    );
    return content;
  }

  const results = (content) => ({
    role: 'user',
    parts: content.parts
      .filter((p) => p.functionCall)
      .map((p) => ({
        functionResponse: {
          id: p.functionCall.id,
          name: p.functionCall.name,
          response: { output: spec.tool_results[p.functionCall.args.city] },
        },
      })),
  });

  async function conversation(stream) {
    const [hello, toolTurn, final] = spec.turns;
    const what = stream ? 'generateContentStream' : 'generateContent';
    const history = [user(spec.questions[0])];
    const r1 = await ask(history, false, hello, stream, `${what} turn 1`);
    history.push(r1, user(spec.questions[1]));
    const r2 = await ask(history, true, toolTurn, stream, `${what} turn 2 (tool call)`);
    history.push(r2, results(r2));
    await ask(history, true, final, stream, `${what} turn 3 (after the tool result)`);
  }

  async function parallelTools(stream) {
    const [calls, final] = spec.parallel_turns;
    const what = stream ? 'generateContentStream' : 'generateContent';
    const history = [user(spec.questions[2])];
    const r1 = await ask(history, true, calls, stream, `${what} parallel tool calls`);
    history.push(r1, results(r1));
    await ask(history, true, final, stream, `${what} after both tool results`);
  }

  async function countTokens() {
    const r = await ai.models.countTokens({ model, contents: [user(spec.questions[1])] });
    if (spec.gemini.count == null) {
      check(Number.isInteger(r.totalTokens) && r.totalTokens > 0, `estimated totalTokens ${r.totalTokens}`);
    } else {
      eq(r.totalTokens, spec.gemini.count, 'totalTokens');
    }
  }

  async function rejects(fn, what) {
    try {
      await fn();
    } catch (error) {
      if (error instanceof Mismatch) throw error;
      return error;
    }
    throw new Mismatch(`${what}: no error`);
  }

  async function error() {
    const e = await rejects(() => ai.models.generateContent({ model, contents: [user(spec.questions[0])] }), 'a 400');
    check(e instanceof ApiError, `a 400 from the upstream: not an ApiError: ${e}`);
    eq(e.status, 400, 'the ApiError status');
    check(e.message.includes(spec.gemini.error), `the upstream's message in ${e.message}`);
    check(e.message.includes('INVALID_ARGUMENT'), `Gemini's status name in ${e.message}`);
  }

  async function streamError() {
    const seen = [];
    const e = await rejects(async () => {
      for await (const chunk of await ai.models.generateContentStream({ model, contents: [user(spec.questions[0])] })) {
        seen.push(chunk.text ?? '');
      }
    }, 'a stream cut mid-answer');
    check(e instanceof ApiError, `a stream cut mid-answer: not an ApiError: ${e}`);
    eq(seen.join(''), spec.gemini.partial, 'the text before the error');
  }

  return {
    conversation: () => conversation(false),
    stream_conversation: () => conversation(true),
    parallel_tools: () => parallelTools(false),
    stream_parallel_tools: () => parallelTools(true),
    count_tokens: countTokens,
    error,
    stream_error: streamError,
  };
}
