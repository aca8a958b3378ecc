// The official openai Node client's usual calls against a running `streamrl serve`:
// models.list, completions and chat completions, plain and streamed, with logprobs and a stop
// sequence. Usage: node check.mjs BASE_URL (e.g. http://127.0.0.1:8000/v1). Prints one JSON line
// with what each call returned; exits 1 (with the reason on stderr) when a call fails or returns
// something an OpenAI client would not expect.
import OpenAI from 'openai';

const client = new OpenAI({baseURL: process.argv[2], apiKey: 'unused', maxRetries: 0,
                           timeout: 60000});

function check(ok, what) {
  if (!ok) throw new Error(what);
}

async function main() {
  const out = {};
  const models = await client.models.list();
  check(models.data.length === 1, 'models.list: one model');
  const model = models.data[0].id;
  out.model = model;

  const completion = await client.completions.create(
      {model, prompt: '1+2=', max_tokens: 8, temperature: 0, logprobs: 2});
  const c = completion.choices[0];
  check(typeof c.text === 'string' && c.logprobs.tokens.join('') === c.text,
        'completion: logprobs tokens spell the text');
  check(c.logprobs.top_logprobs.length === c.logprobs.tokens.length, 'completion: top_logprobs');
  out.completion = c.text;

  let streamed = '', events = 0;
  const stream = await client.completions.create(
      {model, prompt: '1+2=', max_tokens: 8, temperature: 0, stream: true});
  for await (const chunk of stream) {
    streamed += chunk.choices[0]?.text ?? '';
    events += 1;
  }
  check(streamed === c.text, `completion stream: "${streamed}" != "${c.text}"`);
  check(events > 1, 'completion stream: per-token events');
  out.completion_events = events;

  const messages = [{role: 'system', content: 'You add.'}, {role: 'user', content: '1+2?'}];
  const chat = await client.chat.completions.create(
      {model, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2});
  const m = chat.choices[0];
  check(m.message.role === 'assistant' && typeof m.message.content === 'string',
        'chat: an assistant message');
  check(m.logprobs.content.map((t) => t.token).join('') === m.message.content,
        'chat: logprobs tokens spell the content');
  check(chat.usage.prompt_tokens > 0, 'chat: usage');
  out.chat = m.message.content;

  let chatStreamed = '', chatEvents = 0, finish = null;
  const chatStream = await client.chat.completions.create(
      {model, messages, max_tokens: 8, temperature: 0, stream: true,
       stream_options: {include_usage: true}});
  for await (const chunk of chatStream) {
    const choice = chunk.choices[0];
    if (choice) {
      chatStreamed += choice.delta.content ?? '';
      finish = choice.finish_reason ?? finish;
      chatEvents += 1;
    }
  }
  check(chatStreamed === m.message.content,
        `chat stream: "${chatStreamed}" != "${m.message.content}"`);
  check(finish !== null, 'chat stream: a finish reason');
  out.chat_events = chatEvents;

  if (c.text.length >= 3) {
    const stop = c.text.slice(1, 3);
    const cut = await client.completions.create(
        {model, prompt: '1+2=', max_tokens: 8, temperature: 0, stop: [stop], logprobs: 0});
    const want = c.text.slice(0, c.text.indexOf(stop));
    check(cut.choices[0].text === want, `stop: "${cut.choices[0].text}" != "${want}"`);
    check(!cut.choices[0].logprobs.tokens.join('').includes(stop), 'stop: not in the tokens');
    out.stop = stop;
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(`openai client check failed: ${e.message}`);
  process.exit(1);
});
