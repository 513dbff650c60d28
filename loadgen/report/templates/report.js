(function(){
  var groups = document.querySelectorAll('[data-tabs]');
  Array.prototype.forEach.call(groups, function(group){
    var bar = group.querySelector('.tabbar');
    if (!bar) return;
    bar.addEventListener('click', function(ev){
      var b = ev.target.closest('button[data-panel]');
      if (!b) return;
      Array.prototype.forEach.call(bar.querySelectorAll('button[data-panel]'), function(x){
        x.classList.toggle('on', x === b);
      });
      Array.prototype.forEach.call(group.children, function(p){
        if (p.classList.contains('tabpanel')) p.hidden = p.id !== b.getAttribute('data-panel');
      });
    });
  });
})();
