// The web console in a real browser (tests/integ/test_ui_browser.c): Debian's chromium, headless, driven by
// playwright-core.  Usage: node browser.mjs URL SHOTS_DIR HOSTILE_TASK_ID LIVE_URL LIVE_DB RUNS_URL VALUES_TASK
// REJECTED_TOKEN REJECTED_X: URL serves a finished run, LIVE_URL one whose daemon lock the caller holds (LIVE_DB its
// database, which this script writes a new learner step into with the sqlite3 shell; VALUES_TASK there has stored
// learner values in which token REJECTED_TOKEN's ratio REJECTED_X fails the token mask), RUNS_URL the folder holding
// both (runs "smoke" and "live").  Prints one line per check and exits 1 at the first that fails.
import { execFileSync } from 'node:child_process';
import { chromium } from 'playwright-core';

const [url, shots, hostile, liveUrl, liveDb, runsUrl, valuesTask, rejected, rejectedX] = process.argv.slice(2);
const base = url.replace(/\/$/, '');
const fail = (msg) => { console.log('FAIL ' + msg); process.exit(1); };
const ok = (msg) => console.log('ok ' + msg);
const api = async (p) => (await fetch(base + p)).json();

const browser = await chromium.launch({ executablePath: process.env.LT_CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu'] });
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const dialogs = [];
  page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss(); });
  const requests = [];
  page.on('request', (r) => requests.push(r.url()));
  const open = async (p) => {
    await page.goto(base + p);
    await page.waitForSelector('body[data-ready="1"]', { timeout: 15000 });
  };

  // Overview: the run's figures, and a finished run's page settles (no request after the first load).
  await open('/');
  const h1 = await page.textContent('h1');
  if (!/finished/.test(h1)) fail('overview heading: ' + h1);
  const cards = await page.$$eval('#cards .card', (c) => c.length);
  if (cards < 6) fail('overview cards: ' + cards);
  const before = requests.length;
  await page.waitForTimeout(3000);
  if (requests.length !== before) fail('a finished run polled: ' + requests.slice(before).join(' '));
  await page.screenshot({ path: shots + '/ui-overview.png', fullPage: true });
  ok('overview renders and settles');

  // Curves: the chosen metric's points are drawn, and the canvas is not blank.
  const names = (await api('/api/metrics')).names;
  const metric = ['policy/entropy', 'learner/step_s'].find((n) => names.includes(n)) || names[0];
  const series = (await api('/api/metrics?name=' + encodeURIComponent(metric))).series[metric];
  await open('/curves?name=' + encodeURIComponent(metric));
  const drawn = await page.$eval('#curve-chart', (c) => +c.dataset.points);
  if (drawn !== series.length || !drawn) fail(`curve points ${drawn}, expected ${series.length}`);
  // inked: pixels drawn at all; shaded: pixels of the band's translucent fill (alpha 0.18 of 255 on the clear canvas)
  const pixels = () => page.$eval('#curve-chart', (c) => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let inked = 0, shaded = 0;
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 3] > 0 && (d[i] < 200 || d[i + 1] < 200 || d[i + 2] < 200)) inked++;
      if (d[i + 3] >= 44 && d[i + 3] <= 48) shaded++;
    }
    return { inked, shaded };
  });
  const plain = await pixels();
  if (plain.inked < 200) fail('the curve canvas is blank: ' + plain.inked + ' inked pixels');
  ok(`curve draws ${drawn} points of ${metric} (${plain.inked} inked pixels)`);

  // A band: a P/mean drawn with its P/min..P/max shaded around it (the hand-made live run records one with a
  // spread; the smoke run's reward/min..reward/max is as wide as its rewards, which may all be 0).
  const liveBase = liveUrl.replace(/\/$/, '');
  const band = (await (await fetch(liveBase + '/api/metrics?name=ui_test/spread/mean')).json()).bands['ui_test/spread/mean'];
  if (!band || !band.length) fail('no band from the API');
  await page.goto(liveBase + '/curves?name=ui_test/spread/mean');
  await page.waitForSelector('body[data-ready="1"]', { timeout: 15000 });
  const bandDrawn = await page.$eval('#curve-chart', (c) => +c.dataset.bandPoints);
  if (bandDrawn !== band.length) fail(`band steps drawn ${bandDrawn}, expected ${band.length}`);
  const shaded = await pixels();
  if (shaded.shaded < 1000 || shaded.shaded < 10 * plain.shaded) fail(`no shaded band: ${shaded.shaded} pixels (${plain.shaded} without a band)`);
  await page.screenshot({ path: shots + '/ui-curves.png' });
  ok(`ui_test/spread/mean drawn with its min/max band over ${bandDrawn} steps (${shaded.shaded} shaded pixels, ${plain.shaded} without)`);

  // Held-out accuracy per domain: one click selects eval/accuracy and every eval/accuracy/<domain>.
  const evalNames = names.filter((n) => /^eval\/accuracy\/./.test(n));
  if (!evalNames.length) fail('no per-domain eval metric recorded: ' + names.join(' '));
  const evalAll = (await api('/api/metrics?' + ['eval/accuracy', ...evalNames].map((n) => 'name=' + encodeURIComponent(n)).join('&'))).series;
  const evalPts = Object.values(evalAll).reduce((a, s) => a + s.length, 0);
  await open('/curves');
  await page.click('#eval-domains');
  await page.waitForFunction((n) => +document.getElementById('curve-chart').dataset.points === n, evalPts, { timeout: 5000 })
    .catch(() => fail(`eval by domain: not ${evalPts} points drawn`));
  if (!page.url().includes('name=' + encodeURIComponent(evalNames[0]))) fail('the address lacks the domain curve: ' + page.url());
  await page.screenshot({ path: shots + '/ui-curves-eval.png' });
  ok(`eval by domain: ${['eval/accuracy', ...evalNames].join(', ')} (${evalPts} points)`);

  // Trajectories: the filter form narrows the table to the rows the API counts.
  await open('/trajectories');
  const all = await page.$$eval('#traj-table tbody tr', (r) => r.length);
  await page.selectOption('select[name=status]', 'eval');
  await page.click('form.filters button[type=submit]');
  await page.waitForURL(/status=eval/);
  await page.waitForSelector('body[data-ready="1"]');
  await page.waitForFunction(() => [...document.querySelectorAll('#traj-table tbody tr')].every((r) => r.cells[2].textContent === 'eval'));
  const want = (await api('/api/trajectories?status=eval')).total;
  const rows = await page.$$eval('#traj-table tbody tr', (r) => r.length);
  if (rows !== Math.min(want, 50) || rows >= all) fail(`filtered rows ${rows} (all ${all}), expected ${Math.min(want, 50)}`);
  const caption = await page.textContent('#traj-table caption');
  if (!caption.startsWith(String(want))) fail('caption: ' + caption);
  await page.screenshot({ path: shots + '/ui-trajectories.png' });
  ok(`status=eval narrows the table from ${all} to ${rows} rows`);

  // The inspector: script and markup in a trajectory are shown as text; nothing runs, nothing is injected.
  await open('/trajectories/' + hostile);
  await page.waitForTimeout(500);
  const probe = await page.evaluate(() => ({
    injected: document.querySelectorAll('#injected, main img, main script, main b').length,
    scripts: document.scripts.length,
    title: document.title,
    text: document.getElementById('turns').textContent,
    diff: document.getElementById('diff') ? document.getElementById('diff').textContent : null,
    diffAdded: document.querySelectorAll('#diff .dadd').length,
  }));
  if (dialogs.length) fail('a dialog opened: ' + dialogs.join(' | '));
  if (probe.injected) fail(probe.injected + ' injected element(s)');
  if (probe.scripts !== 1 || probe.title === 'pwned') fail('a script ran or was added');
  if (!probe.text.includes("<script>document.title='pwned'</script>") || !probe.text.includes('</textarea></pre><img id="injected"'))
    fail('the markup is not shown as text: ' + probe.text.slice(0, 300));
  if (!probe.diff || !probe.diff.includes('+x = \'<script>document.title="pwned"</script>\'') || probe.diffAdded !== 1)
    fail('the episode\'s diff is not shown as text, its added lines marked: ' + probe.diff);
  await page.screenshot({ path: shots + '/ui-inspector.png', fullPage: true });
  ok('hostile text and diff render as text (no dialog, no injected element)');
  const trained = (await api('/api/trajectories?status=consumed&limit=1')).rows[0];
  await open('/trajectories/' + trained.task_id);
  const toks = await page.$$eval('#tokens .tok', (t) => t.length);
  if (toks !== trained.ntokens) fail(`inspector tokens ${toks}, expected ${trained.ntokens}`);
  ok(`a trained trajectory's ${toks} tokens shown`);
  // ... with what the learner step that trained it computed, coloured by the π_old/π_rollout ratio.
  const tj = await api('/api/trajectories/' + trained.task_id);
  const tv = tj.token_values;
  if (!tv || tv.source !== 'stored' || tv.step !== tj.training.step || tj.training.verdict === 'ready')
    fail('the trained trajectory has no stored learner values: ' + JSON.stringify(tj.training));
  await page.selectOption('#colour-by', 'ratio');
  const gen = tj.loss_mask.indexOf(1);
  await page.hover(`#tokens .tok[data-i="${gen}"]`);
  const shown = await page.textContent('#token-hover');
  const ratio = tv.ratio[gen].toFixed(4);
  if (!shown.includes('x_t = π_old/π_rollout ' + ratio)) fail(`token ${gen}: hover shows "${shown}", expected ratio ${ratio}`);
  await page.screenshot({ path: shots + '/ui-trajectory.png', fullPage: true });
  ok(`its step ${tv.step}'s stored ratio shows on hover: ${shown}`);

  // A known rejected token: its ratio and the MIS token mask's verdict on hover, each context on its own.
  const live = liveUrl.replace(/\/$/, '');
  await page.goto(`${live}/trajectories/${valuesTask}`);
  await page.waitForSelector('body[data-ready="1"]', { timeout: 15000 });
  await page.selectOption('#colour-by', 'mis_mask');
  const tok = `#tokens .tok[data-i="${rejected}"]`;
  await page.hover(tok);
  const said = await page.textContent('#token-hover'), title = await page.getAttribute(tok, 'title');
  const x = Number(rejectedX).toFixed(4);
  for (const s of [said, title])
    if (!s.includes('rejected by the MIS token mask') || !s.includes(x) || !s.includes('[0.5, 2]')) fail(`rejected token ${rejected}: "${s}"`);
  const contexts = await page.$$eval('#tokens section.context', (c) => c.length);
  if (contexts !== 2) fail(`contexts shown: ${contexts}, expected 2`);
  const verdict = await page.textContent('dl.facts');
  if (!verdict.includes('geometric-mean ratio 1.46590 within [0.5, 2]: kept') || !verdict.includes('stored by step 5'))
    fail('the trajectory verdict: ' + verdict);
  await page.screenshot({ path: shots + '/ui-token-values.png', fullPage: true });
  ok(`token ${rejected} of task ${valuesTask}: ${said}`);

  // A live run: the overview polls, and a step the learner records shows within 5 s without a reload.
  await page.goto(liveUrl);
  await page.waitForSelector('body[data-ready="1"]', { timeout: 15000 });
  if ((await page.textContent('#live')).indexOf('live') < 0) fail('the live run is not shown live');
  const stepCard = () => page.$eval('#cards .card:nth-child(2) .v', (e) => e.textContent);
  const step0 = await stepCard();
  const t0 = Date.now();
  execFileSync('sqlite3', [liveDb, "INSERT INTO checkpoints(version, step, kind, path) VALUES(42, 42, 'weights', 'x')"]);
  await page.waitForFunction(() => document.querySelector('#cards .card:nth-child(2) .v').textContent === '42', null, { timeout: 5000 })
    .catch(() => fail(`the new step did not show within 5 s (still ${step0})`));
  ok(`live: step ${step0} -> 42 shown after ${Date.now() - t0} ms without a reload`);

  // A folder of runs: listed on /, and one run's curve overlaid with another's.
  await page.goto(runsUrl);
  await page.waitForSelector('main li a');
  const listed = await page.$$eval('main li a', (a) => a.map((x) => x.textContent).join(','));
  if (listed !== 'live,smoke') fail('runs listed: ' + listed);
  const pts = async (r) => (await (await fetch(`${runsUrl.replace(/\/$/, '')}/api/metrics?run=${r}&name=eval/accuracy`)).json()).series['eval/accuracy'].length;
  const both = (await pts('smoke')) + (await pts('live'));
  await page.goto(runsUrl.replace(/\/$/, '') + '/curves?run=smoke&also=live&name=eval/accuracy');
  await page.waitForSelector('body[data-ready="1"]');
  const overlaid = await page.$eval('#curve-chart', (c) => +c.dataset.points);
  if (overlaid !== both) fail(`overlaid points ${overlaid}, expected ${both}`);
  ok(`runs listed (${listed}); eval/accuracy of smoke and live overlaid: ${overlaid} points`);
} finally {
  await browser.close();
}
